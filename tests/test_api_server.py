"""The API server in front of the engine (sim/frontend): ingress FIFO, N servers, egress, knobs.

Hand-computed with the default profile's numbers (3 ms chat / 2 ms completions per request,
1 us per prompt token, 50 us per streamed token, 0.5 ms to close a stream) and a constant step
cost, so only the front-end's arithmetic is under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli.main import _load, app
from sim.config.schema import make_config
from sim.config.vllm_args import parse_vllm_serve
from sim.errors import ConfigError
from sim.frontend.egress import Capacity, Stream, deliver, middle_counts
from sim.frontend.profile import VLLM_API_SERVER as P
from sim.frontend.stage import FRONTEND_COLUMNS
from sim.run.simulate import simulate
from tests.conftest import make_trace
from tests.helpers import assert_fast_forward_identical, conv_slice

COST = "constant:0.01"
D, END = P.output_token_s, P.end_s


def rows(prompts: list[int], out: int = 4, at: float = 0.0) -> Any:
    return make_trace([{"arrival_s": at, "prompt_tokens": p, "output_tokens": out} for p in prompts])


def run(trace: Any, **kw: Any) -> pd.DataFrame:
    return simulate(make_config(**{"cost_model": COST, **kw}), trace).requests


def ingress_s(prompt: int, endpoint: str = "chat") -> float:
    return (P.chat_base_s if endpoint == "chat" else P.completions_base_s) + P.prompt_token_s * prompt


def test_three_requests_sent_together_queue_in_fifo_order_at_one_api_server() -> None:
    q = run(rows([100, 2000, 300]))
    s = [ingress_s(p) for p in (100, 2000, 300)]
    assert q["api_ingress_s"].tolist() == pytest.approx([s[0], s[0] + s[1], s[0] + s[1] + s[2]], abs=1e-12)
    assert q["engine_arrival_s"].tolist() == pytest.approx(q["api_ingress_s"].tolist(), abs=1e-12)
    assert (q["api_server"] == 0).all() and (q["arrival_s"] == 0.0).all()  # arrival_s: the client's send time
    assert (q["first_scheduled_s"] >= q["engine_arrival_s"] - 1e-12).all()  # the engine never sees one early


def test_the_engine_sees_each_request_at_its_ingress_completion() -> None:
    on = run(rows([100, 2000, 300]))
    # the same engine, fed at those instants with no front-end: the same engine times
    shifted = make_trace([{"arrival_s": t, "prompt_tokens": p, "output_tokens": 4}
                          for t, p in zip(on["engine_arrival_s"], (100, 2000, 300), strict=True)])
    off = run(shifted, api_server_count=0)
    assert on["first_scheduled_s"].tolist() == off["first_scheduled_s"].tolist()
    assert (on["first_token_s"] - on["api_first_egress_s"]).tolist() == pytest.approx(off["first_token_s"].tolist(), abs=1e-12)
    assert (on["finish_s"] - on["api_egress_s"]).tolist() == pytest.approx(off["finish_s"].tolist(), abs=1e-12)
    assert (off["api_server"] == -1).all() and (off["api_ingress_s"] == 0).all()


def test_more_api_servers_take_requests_in_parallel() -> None:
    s = [ingress_s(p) for p in (100, 2000, 300)]
    three = run(rows([100, 2000, 300]), api_server_count=3)
    assert three["api_ingress_s"].tolist() == pytest.approx(s, abs=1e-12)  # no queueing at all
    assert sorted(three["api_server"]) == [0, 1, 2]
    two = run(rows([100, 2000, 300]), api_server_count=2)
    # the third waits for the server that frees up first (request 0's, after s[0])
    assert two["api_ingress_s"].tolist() == pytest.approx([s[0], s[1], s[0] + s[2]], abs=1e-12)
    assert two["api_server"].tolist() == [0, 1, 0]


@pytest.mark.parametrize("endpoint,first_chunks,base", [("chat", 2, P.chat_base_s),
                                                         ("completions", 1, P.completions_base_s)])
def test_at_low_load_ttft_gains_exactly_the_ingress_and_the_first_chunks(endpoint: str, first_chunks: int,
                                                                         base: float) -> None:
    one = rows([1000], out=20, at=1.0)
    off, on = run(one, api_server_count=0), run(one, endpoint=endpoint)
    assert on["ttft_s"][0] - off["ttft_s"][0] == pytest.approx(base + 1000e-6 + first_chunks * D, abs=1e-12)
    assert on["e2e_s"][0] - off["e2e_s"][0] == pytest.approx(base + 1000e-6 + D + END, abs=1e-12)
    assert on["arrival_s"][0] == 1.0 and on["engine_arrival_s"][0] == pytest.approx(1.0 + base + 1000e-6)


def test_a_burst_of_1000_prompts_is_bound_by_the_api_server() -> None:
    out = 16
    q = run(rows([128] * 1000, out=out), cost_model="constant:0.001")
    s = ingress_s(128)
    assert q["engine_arrival_s"].max() == pytest.approx(1000 * s, rel=1e-9)  # the last ingress
    # the server never idles: every byte of work is done back to back, so the last client
    # finish is the total work (ingress + all egress), not the engine's far earlier end
    work = 1000 * (s + 2 * D + (out - 2) * D + D + END)
    engine_end = (q["finish_s"] - q["api_egress_s"]).max()
    assert engine_end < 0.8 * work
    assert q["finish_s"].max() == pytest.approx(work, rel=1e-3)
    four = run(rows([128] * 1000, out=out), cost_model="constant:0.001", api_server_count=4)
    assert four["engine_arrival_s"].max() == pytest.approx(250 * s, rel=1e-9)
    assert four["finish_s"].max() == pytest.approx(work / 4, rel=0.02)


def one(first: list[float], finish: list[float], n: list[int], ends: np.ndarray, cap: Capacity | None = None,
        w1: float = 2 * D, token_s: float = D) -> tuple[np.ndarray, np.ndarray]:
    """Client (first, finish) times of requests on one server and one replica (``ends``)."""
    busy = ((cap.start, cap.start + cap.length),) if cap is not None else ((np.zeros(0), np.zeros(0)),)
    k = len(first)
    return deliver(np.array(first), np.array(finish), np.array(n), np.array(n), np.zeros(k, np.int64), busy,
                   np.zeros(k, np.int64), [ends], w1, token_s, END)


def test_egress_is_a_fifo_of_step_batches_in_the_time_ingress_leaves_free() -> None:
    ends = np.round(np.arange(0.1, 0.2001, 0.01), 12)  # a step every 10 ms
    cap = Capacity.of(np.array([0.0]), np.array([0.003]))  # one ingress, long done
    # not saturated: 9 middle tokens, one at each step end between the first and the last
    first, fin = one([0.1], [0.2], [11], ends, cap)
    assert (first[0], fin[0]) == pytest.approx((0.1 + 2 * D, 0.2 + D + END), abs=1e-12)
    # saturated: 100 middle tokens of 1 ms, one per 0.1 ms step, behind the first token's 1 ms
    fast = np.round(np.arange(0.0, 0.01001, 1e-4), 12)
    first, fin = one([0.0], [0.0101], [102], np.r_[fast, 0.0101], None, 1e-3, 1e-3)
    assert fin[0] == pytest.approx(1e-3 + 0.1 + 1e-3 + END, abs=1e-12)  # never idle from t = 0
    # an ingress during that backlog (30 ms from t = 0.05) goes first: the last token waits for it
    first, fin2 = one([0.0], [0.0101], [102], np.r_[fast, 0.0101], Capacity.of(np.array([0.05]), np.array([0.08])),
                      1e-3, 1e-3)
    assert fin2[0] == pytest.approx(fin[0] + 0.03, abs=1e-12)
    # two streams ending at one step: one batch, both delivered when all of it is done
    first, fin = one([0.1, 0.1], [0.2, 0.2], [2, 2], ends, cap, D, D)
    assert fin.tolist() == pytest.approx([0.2 + 2 * (D + END)] * 2, abs=1e-12)
    assert first.tolist() == pytest.approx([0.1 + 2 * D] * 2, abs=1e-12)


def test_a_request_streams_one_middle_token_per_step_of_its_own_replica() -> None:
    ends = np.arange(1, 11) * 0.01
    assert middle_counts(ends, 0, 10, np.array([0.02]), np.array([0.08]), np.array([7])).tolist() == \
        [0, 0, 1, 1, 1, 1, 1, 0, 0, 0]  # tokens 2..6 at the five steps between 0.02 and 0.08
    # preempted meanwhile (more steps than tokens): at most n - 2, from the first step on
    assert middle_counts(ends, 0, 10, np.array([0.02]), np.array([0.1]), np.array([4])).tolist() == \
        [0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    # still running (finish inf), counted over a chunk of the steps only
    assert middle_counts(ends, 4, 8, np.array([0.02]), np.array([np.inf]), np.array([100])).tolist() == [1] * 4


def test_the_egress_queue_matches_a_brute_force_fluid_on_a_fine_time_grid() -> None:
    """The running-sum solution against the queue integrated on a 10 us grid (cumulative work
    A(t) in steps at the batch instants, departures D = min over s <= t of A(s) + C(t) - C(s))."""
    rng = np.random.default_rng(3)
    dt = 1e-5
    for _ in range(5):
        ends = np.round(np.cumsum(rng.uniform(0.002, 0.012, 60)), 5)
        m = int(rng.integers(2, 7))
        i0 = np.sort(rng.integers(0, 30, m))
        n = rng.integers(1, 30, m)
        f, e = ends[i0], ends[np.minimum(i0 + np.maximum(n - 1, 0), len(ends) - 1)]
        n = np.minimum(n, np.searchsorted(ends, e) - i0 + 1)  # as many tokens as steps ran
        cap = Capacity.of(np.array([0.0, 0.25]), np.array([0.005, 0.3]))  # one ingress mid-run
        first, fin = one(f.tolist(), e.tolist(), n.tolist(), ends, cap, 2e-3, 1e-3)
        mids = middle_counts(ends, 0, len(ends), f, e, n)
        ts = np.arange(0.0, 1.5, dt)
        a = np.zeros_like(ts)
        for i in range(m):
            a += (ts >= f[i]) * 2e-3 + (ts >= e[i]) * ((1e-3 if n[i] >= 2 else 0.0) + END)
        for t_k, c_k in zip(ends, mids, strict=True):
            a += (ts >= t_k) * 1e-3 * c_k
        c = cap.at(ts)
        done = np.minimum(np.minimum.accumulate(a - c) + c, a)
        for i in range(m):
            for t, mine in ((f[i], first[i]), (e[i], fin[i])):
                level = a[np.searchsorted(ts, t - 1e-12)]  # all work in by t, its batch included
                brute = ts[np.searchsorted(done, level - 1e-9)]
                assert mine == pytest.approx(brute, abs=5 * dt)


def test_a_queue_solved_in_chunks_is_the_queue_solved_at_once() -> None:
    """What a closed loop does as the run goes (sim/frontend/live.py): the backlog carried."""
    rng = np.random.default_rng(5)
    t = np.cumsum(rng.uniform(1e-4, 3e-3, 400))
    w = rng.uniform(0.0, 2e-3, 400)
    cap = Capacity.of(np.array([0.1, 0.5]), np.array([0.13, 0.52]))
    whole = Stream().solve(cap, t, w)
    s, parts = Stream(), []
    for a, b in ((0, 7), (7, 150), (150, 151), (151, 400)):
        parts.append(s.solve(cap, t[a:b], w[a:b]))
    assert np.concatenate(parts) == pytest.approx(whole, abs=1e-12)


def test_fanned_out_samples_share_one_ingress() -> None:
    tr = make_trace([{"arrival_s": 0.0, "prompt_tokens": 500, "output_tokens": 4, "n": 3},
                     {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 4}])
    q = run(tr)
    assert q["engine_arrival_s"].tolist()[:3] == pytest.approx([ingress_s(500)] * 3, abs=1e-12)
    assert q["engine_arrival_s"].tolist()[3] == pytest.approx(ingress_s(500) + ingress_s(100), abs=1e-12)


def test_fast_forward_and_exact_steps_give_the_same_frames_with_the_front_end() -> None:
    ff = assert_fast_forward_identical({"cost_model": COST, "api_server_count": 2}, conv_slice(120, speed=20.0))
    assert set(FRONTEND_COLUMNS) <= set(ff.requests.columns) and (ff.requests["api_ingress_s"] > 0).all()


def test_streamed_and_summary_only_runs_carry_the_same_columns(tmp_path: Path) -> None:
    tr, cfg = conv_slice(60, speed=5.0), make_config(cost_model=COST)
    full = simulate(cfg, tr).requests
    simulate(cfg, tr, stream_to=tmp_path)
    streamed = pd.read_parquet(tmp_path / "requests.parquet")
    pd.testing.assert_frame_equal(streamed[list(FRONTEND_COLUMNS)], full[list(FRONTEND_COLUMNS)])
    assert simulate(cfg, tr, summary_only=True).summary.ttft_s == simulate(cfg, tr).summary.ttft_s


def test_the_knobs_their_defaults_and_refusals() -> None:
    assert make_config().api_server_count == 1 and make_config().endpoint == "chat"
    assert make_config(usage_context="llm-class").api_server_count == 0  # LLM(...) runs no API server
    assert make_config(endpoint="/v1/completions").endpoint == "completions"
    assert make_config(endpoint="/v1/chat/completions").endpoint == "chat"
    assert parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct --api-server-count 4").config[
        "api_server_count"] == 4
    with pytest.raises(ConfigError, match=r"llm-class .* runs no API server"):
        make_config(usage_context="llm-class", api_server_count=2)
    with pytest.raises(ConfigError, match="--endpoint completions: no API server"):
        make_config(api_server_count=0, endpoint="completions")
    with pytest.raises(ConfigError, match="--api-server-count"):
        make_config("flags", api_server_count=-1)


def test_the_cli_takes_the_flags_and_summary_json_names_the_profile(tmp_path: Path) -> None:
    tiny = tmp_path / "tiny.csv"
    pd.DataFrame({"arrival_s": [0.0, 0.0], "prompt_tokens": [50, 60], "output_tokens": [3, 3]}).to_csv(tiny, index=False)
    _load(("sim.cli.simulate",))
    res = CliRunner().invoke(app, ["simulate", str(tiny), "--out", str(tmp_path / "run"), "--cost-model", COST,
                                   "--api-server-count", "2", "--endpoint", "completions"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert doc["api_server"] == {"profile": P.name, "source": P.source, "count": 2, "endpoint": "completions"}
    assert doc["config"]["api_server_count"] == 2 and "API server" in res.output
    q = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert q["api_ingress_s"].tolist() == pytest.approx([ingress_s(50, "completions"), ingress_s(60, "completions")])
