"""Closed-loop clients (issue 49, points 1 and 3): `--max-concurrency N` and multi-turn sessions.

Expected times come from the constant step cost by hand (one step = 0.01 s, a prompt prefilled in
one step, one token a step), hits from the block arithmetic; fast-forward is compared with
``--exact-steps`` frame for frame."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli.main import _load, app
from sim.config import make_config
from sim.config.vllm_bench import parse_vllm_bench
from sim.errors import ConfigError, TraceError
from sim.run.clients import ClientSpec
from sim.run.simulate import simulate
from tests.conftest import make_trace
from tests.helpers import (
    BUNDLED,
    assert_ff_identical_closed_loop,
    conv_slice,
    in_flight,
    kvsim,
    session_trace,
    write_sessions,
)

_load()
CONST = {"cost_model": "constant:0.01", "api_server_count": 0, "async_scheduling": False}


def run(trace: Any, n: int | None, exact: bool = False, **kw: Any) -> pd.DataFrame:
    return simulate(make_config(**{**CONST, **kw, "exact_steps": exact}), trace, clients=ClientSpec(n)).requests


# ---- --max-concurrency: hand-computed ----------------------------------------------------------
@pytest.mark.parametrize("exact", [False, True])
def test_two_slots_over_five_requests_by_hand(exact: bool) -> None:
    """Outputs 3, 5, 2, 4, 1, all ready at 0. r0 and r1 go at 0 (prefill step 0..0.01, a token a
    step): r0 ends 0.03, r1 0.05. r2 takes r0's slot at 0.03 and ends 0.05 (2 tokens); r3 and r4
    take the two slots freed at 0.05 and end 0.09 and 0.06."""
    tr = make_trace([dict(arrival_s=0.0, prompt_tokens=10, output_tokens=o) for o in (3, 5, 2, 4, 1)])
    req = run(tr, 2, exact)
    assert req["arrival_s"].tolist() == pytest.approx([0, 0, 0.03, 0.05, 0.05], abs=1e-12)
    assert req["finish_s"].tolist() == pytest.approx([0.03, 0.05, 0.05, 0.09, 0.06], abs=1e-12)
    assert req["first_token_s"].tolist() == pytest.approx([0.01, 0.01, 0.04, 0.06, 0.06], abs=1e-12)
    open_loop = run(tr, None, exact)  # the same trace, open loop: everything at 0
    assert (open_loop["arrival_s"] == 0).all() and open_loop["finish_s"].max() < req["finish_s"].max()


def test_in_flight_never_exceeds_n_and_reaches_it() -> None:
    tr = conv_slice(60, speed=20.0)
    for n in (1, 4, 7):
        req = run(tr, n)
        flight = in_flight(req)
        assert flight.max() == n, n
        # each send is the trace's time or the instant a slot freed (a finish), never earlier
        sent, own = req["arrival_s"].to_numpy(), tr.df["arrival_s"].to_numpy()
        assert (sent >= own).all()
        late = sent > own
        assert np.isin(sent[late], req["finish_s"].to_numpy()).all()
        assert late.any(), "no request waited for a slot: the test proves nothing"


@pytest.mark.parametrize("exact", [False, True])
def test_a_rejected_request_frees_its_slot_at_once(exact: bool) -> None:
    """One slot; the middle request is longer than max_model_len: rejected when sent (0.03, when
    the first ends after 3 tokens), and the third is sent at that same instant."""
    tr = make_trace([dict(arrival_s=0.0, prompt_tokens=p, output_tokens=3) for p in (10, 100, 10)])
    req = run(tr, 1, exact, max_model_len=64)
    assert req["status"].tolist() == ["finished", "rejected", "finished"]
    assert req["arrival_s"].iloc[1] == req["arrival_s"].iloc[2] == req["finish_s"].iloc[0]
    assert req["finish_s"].iloc[2] == pytest.approx(0.06, abs=1e-12)


def test_a_rate_and_slots_together_wait_for_both() -> None:
    """Spaced arrivals (0.5 s apart, each request 0.05 s long): one slot never delays anyone, so
    the closed loop equals the open loop; arrivals all at 0 queue behind the slot."""
    spaced = make_trace([dict(arrival_s=0.5 * i, prompt_tokens=10, output_tokens=5) for i in range(6)])
    pd.testing.assert_frame_equal(run(spaced, 1), run(spaced, None), check_exact=True)
    burst = make_trace([dict(arrival_s=0.0, prompt_tokens=10, output_tokens=5) for _ in range(6)])
    req = run(burst, 1)
    assert req["arrival_s"].iloc[1:].tolist() == req["finish_s"].iloc[:-1].tolist()


# ---- sessions ----------------------------------------------------------------------------------
def two_turns(think: float, p1: int = 40, o1: int = 30, new: int = 25) -> Any:
    ids1 = list(range(1, p1 + 1))
    ids2 = ids1 + list(range(1000, 1000 + o1)) + list(range(5000, 5000 + new))
    return make_trace([
        dict(arrival_s=0.0, prompt_tokens=p1, output_tokens=o1, prompt_token_ids=ids1, session_id="a", turn=1,
             think_time_s=0.0),
        dict(arrival_s=0.0, prompt_tokens=len(ids2), output_tokens=3, prompt_token_ids=ids2, session_id="a", turn=2,
             think_time_s=think)])


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("block", [16, 8])
def test_second_turn_hits_the_first_turns_prompt_and_output(exact: bool, block: int) -> None:
    think, p1, o1 = 0.37, 40, 30
    req = run(two_turns(think, p1, o1), None, exact, block_size=block)
    first, second = req.iloc[0], req.iloc[1]
    assert second["arrival_s"] == first["finish_s"] + think  # sent exactly think_time_s after the last token
    # turn 1 computed p1 + o1 - 1 tokens (its last sampled token never is): its full blocks are cached
    assert second["prefix_hit_tokens"] == (p1 + o1 - 1) // block * block
    assert second["prefix_hit_tokens"] > p1 // block * block  # more than the prompt: the output's blocks too
    assert first["prefix_hit_tokens"] == 0


def test_a_turn_that_does_not_repeat_the_prompt_hits_nothing() -> None:
    """The hits come from the hashes: a second turn whose prompt differs from the first's in its
    first block is not chained to it, and finds nothing cached."""
    tr = two_turns(0.1)
    df = tr.df.copy()
    ids = list(df.at[1, "prompt_token_ids"])
    ids[3] = 77777
    df.at[1, "prompt_token_ids"] = ids
    req = run(type(tr)(df=df, path=tr.path, format=tr.format), None, block_size=16)
    assert req["prefix_hit_tokens"].tolist() == [0, 0]
    assert req["arrival_s"].iloc[1] == req["finish_s"].iloc[0] + 0.1  # still sent after the first turn


def test_generated_sessions_chain_their_turns() -> None:
    tr = session_trace()
    req = run(tr, None)
    df = tr.df
    for _, s in df.groupby("session_id"):
        rows = s.sort_values("turn")
        for a, b in zip(rows.index[:-1], rows.index[1:], strict=True):
            assert list(df.at[b, "prompt_token_ids"][:df.at[a, "prompt_tokens"]]) == list(df.at[a, "prompt_token_ids"])
            assert req.at[b, "arrival_s"] == req.at[a, "finish_s"] + df.at[b, "think_time_s"]
    later = df["turn"] > 1
    assert (req.loc[later, "prefix_hit_tokens"] > 0).all()


# ---- fast-forward == exact steps ----------------------------------------------------------------
CONFIGS = [
    dict(model="llama-3.1-8b", gpu="h100", api_server_count=0),                                   # async
    dict(model="llama-3.1-8b", gpu="h100", api_server_count=0, async_scheduling=False),          # sync
    dict(model="llama-3.1-8b", gpu="h100", api_server_count=0, num_gpu_blocks=260, block_size=16,  # tight pool
         max_model_len=4096),
    dict(model="llama-3.1-8b", gpu="h100", api_server_count=0, enable_prefix_caching=True, async_scheduling=False,
         block_size=16),
]
IDS = ["async", "sync", "tight-async", "caching-sync"]


@pytest.mark.parametrize("kw", CONFIGS, ids=IDS)
def test_fast_forward_equals_exact_steps_closed_loop(kw: dict[str, Any]) -> None:
    assert_ff_identical_closed_loop(kw, conv_slice(40, speed=10.0), 6)


@pytest.mark.parametrize("kw", CONFIGS, ids=IDS)
def test_fast_forward_equals_exact_steps_sessions(kw: dict[str, Any]) -> None:
    ff = assert_ff_identical_closed_loop(kw, session_trace(), None)
    assert (ff.requests["prefix_hit_tokens"] > 0).any()


# ---- refusals, one line -------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, -3])
def test_n_below_one_is_refused_in_one_line(n: int, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--max-concurrency"):
        ClientSpec(n)
    code, text = kvsim("simulate", str(BUNDLED), "--out", str(tmp_path / "r"), "--cost-model", "constant:0.01",
                       "--api-server-count", "0", "--max-concurrency", str(n))
    assert code == 2 and len(text.strip().splitlines()) == 1 and "--max-concurrency" in text, text
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("rows, field", [
    ([dict(session_id="a", turn=1, think_time_s=0.0), dict(session_id="a", turn=3, think_time_s=1.0)], "turn"),
    ([dict(session_id="a", turn=1, think_time_s=0.0), dict(session_id="a", turn=2, think_time_s=-1.0)],
     "think_time_s"),
    ([dict(session_id="a", turn=2, think_time_s=0.0)], "turn"),
    ([dict(session_id="a", turn=1, think_time_s=0.0), dict(session_id="a", turn=1, think_time_s=0.0)], "turn"),
])
def test_bad_sessions_are_one_line(rows: list[dict[str, Any]], field: str) -> None:
    df = pd.DataFrame([{**r, "arrival_s": 0.0, "prompt_tokens": 4, "output_tokens": 2} for r in rows])
    df["source_line"] = np.arange(2, len(df) + 2)
    with pytest.raises(TraceError) as e:
        make_trace(df.to_dict("records"), path="s.jsonl")
    msg = str(e.value)
    assert "\n" not in msg and field in msg and "s.jsonl" in msg, msg


def test_a_bench_line_sets_max_concurrency(tmp_path: Path) -> None:
    assert parse_vllm_bench("vllm bench serve --max-concurrency 3 --num-prompts 12").max_concurrency == 3
    out = tmp_path / "res.json"
    code, text = kvsim("simulate", "--out", str(tmp_path / "r"), "--cost-model", "constant:0.01",
                       "--api-server-count", "0", "--save-result", str(out), "--", "vllm", "bench", "serve",
                       "--max-concurrency", "3", "--num-prompts", "12", "--random-input-len", "64",
                       "--random-output-len", "16")
    assert code == 0, text
    import json
    assert json.loads(out.read_text())["max_concurrency"] == 3
    req = pd.read_parquet(tmp_path / "r" / "requests.parquet")
    assert in_flight(req).max() == 3 and len(req) == 12


def test_sessions_and_slots_together_are_refused(tmp_path: Path) -> None:
    trace = tmp_path / "s.jsonl"
    write_sessions(trace)
    code, text = kvsim("simulate", str(trace), "--out", str(tmp_path / "r"), "--cost-model", "constant:0.01",
                       "--api-server-count", "0", "--max-concurrency", "2")
    assert code == 2 and len(text.strip().splitlines()) == 1 and "--max-concurrency with a session trace" in text, text


def test_plan_refuses_a_session_trace_in_one_line(tmp_path: Path) -> None:
    """A plan searches arrival rates; a session's turns have no rate of their own (each is sent as
    the one before it ends): refused, not replayed at the turns' placeholder times."""
    trace = tmp_path / "s.jsonl"
    write_sessions(trace)
    code, text = kvsim("plan", str(trace), "--gpu", "h100", "--slo-ttft-p90", "5", "--slo-tpot-p90", "0.2",
                       "--window", "100", "--api-server-count", "0", "--out", str(tmp_path / "p"))
    assert code == 2 and len(text.strip().splitlines()) == 1, text
    assert "not modelled yet: plan with a session trace" in text, text


def test_open_loop_tools_refuse_a_session_trace(tmp_path: Path) -> None:
    """Prefix bounds and an open-loop fleet replay would read the later turns' placeholder times as
    send times (and the bounds would miss every turn's hits on the output before it): refused."""
    from sim.cluster.replay import replay_fleet
    from sim.cluster.whatif import fleet_prefix_bounds

    trace = tmp_path / "s.jsonl"
    write_sessions(trace)
    code, text = kvsim("trace", "prefix", str(trace), "--cache-tokens", "4096", "--replicas", "2")
    assert code != 0 and len(text.strip().splitlines()) == 1, text
    assert "not modelled yet: prefix bounds with a session trace" in text, text
    tr = session_trace(sessions=3)
    with pytest.raises(ConfigError, match="prefix bounds with a session trace"):
        fleet_prefix_bounds(tr, 2, 4096)
    with pytest.raises(ConfigError, match="open-loop fleet replay with a session trace"):
        replay_fleet([make_config(cost_model="constant:0.01", api_server_count=0)] * 2, tr)
    labels = type(tr)(df=tr.df.drop(columns=["think_time_s"]), path=tr.path, format=tr.format)
    assert fleet_prefix_bounds(labels, 2, 4096).unbounded.prompt_tokens > 0  # session ids alone: labels


def test_trace_gen_writes_a_session_trace_from_a_session_spec(tmp_path: Path) -> None:
    from workloads import load_trace

    spec = tmp_path / "s.yaml"
    spec.write_text("seed: 3\nsessions: 4\nturns: {kind: uniform, low: 2, high: 3}\n"
                    "new_tokens: {kind: uniform, low: 20, high: 40}\noutput: {kind: uniform, low: 10, high: 20}\n"
                    "think_time_s: 1.5\n")
    out = CliRunner().invoke(app, ["trace", "gen", str(spec), str(tmp_path / "s.jsonl")])
    assert out.exit_code == 0, out.output
    df = load_trace(tmp_path / "s.jsonl").df
    assert {"session_id", "turn", "think_time_s"} <= set(df.columns) and df["session_id"].nunique() == 4
    for _, g in df.sort_values(["session_id", "turn"]).groupby("session_id"):
        ids = g["prompt_token_ids"].tolist()
        assert list(g["turn"]) == list(range(1, len(g) + 1))
        assert all(list(b[: len(a)]) == list(a) for a, b in itertools.pairwise(ids))  # earlier turns: a prefix
