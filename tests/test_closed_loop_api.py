"""Closed-loop clients behind the API server (sim/frontend/live.py): a slot frees when the last
chunk reaches its client, and the next request then runs its ingress before the engine sees it.

Hand-computed with the default front-end profile (3 ms + 1 us a prompt token of chat ingress,
50 us a streamed token, 2 chunks before the first token, 0.5 ms to close) and a constant step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.frontend.profile import VLLM_API_SERVER as P
from sim.run.clients import ClientSpec
from sim.run.simulate import simulate
from tests.conftest import make_trace
from tests.helpers import conv_slice, in_flight, kvsim, session_trace

D, END = P.output_token_s, P.end_s
INGRESS = P.chat_base_s + 10 * P.prompt_token_s


def test_one_client_sends_each_request_when_the_last_chunk_reaches_it() -> None:
    tr = make_trace([dict(arrival_s=0.0, prompt_tokens=10, output_tokens=3)] * 2)
    q = simulate(make_config(cost_model="constant:0.01", async_scheduling=False), tr, clients=ClientSpec(1)).requests
    a0 = INGRESS  # sent at 0; prefill, then 2 decodes of 10 ms
    assert q["engine_arrival_s"][0] == pytest.approx(a0, abs=1e-12)
    assert q["first_token_s"][0] == pytest.approx(a0 + 0.01 + 2 * D, abs=1e-12)
    f0 = a0 + 0.03 + D + END  # the middle token went out at a0 + 0.02, long done
    assert q["finish_s"][0] == pytest.approx(f0, abs=1e-12)
    assert q["arrival_s"][1] == q["finish_s"][0]  # sent the moment its client has the last chunk
    assert q["engine_arrival_s"][1] == pytest.approx(f0 + INGRESS, abs=1e-12)
    assert q["finish_s"][1] == pytest.approx(f0 + INGRESS + 0.03 + D + END, abs=1e-12)
    bare = simulate(make_config(cost_model="constant:0.01", async_scheduling=False, api_server_count=0), tr,
                    clients=ClientSpec(1)).requests
    assert bare["arrival_s"][1] == pytest.approx(0.03, abs=1e-12)  # without one: at the engine finish


@pytest.mark.parametrize("n", [1, 4, 16])
def test_client_times_are_the_open_loop_rule_on_the_closed_loop_own_sends(n: int) -> None:
    """One rule: replaying the closed loop's requests open loop at the times it sent them gives
    the same engine and the same client times (the open loop's egress, solved after the run)."""
    tr = conv_slice(150, speed=8.0)
    closed = simulate(make_config(), tr, clients=ClientSpec(n)).requests
    assert in_flight(closed).max() == n
    again = tr.df.copy()
    again["arrival_s"] = closed["arrival_s"].to_numpy()
    opened = simulate(make_config(), type(tr)(df=again.sort_values("arrival_s", kind="stable").reset_index(drop=True),
                                                path=tr.path, format=tr.format)).requests
    opened = opened.set_index(again.sort_values("arrival_s", kind="stable").index).sort_index()
    for col in ("engine_arrival_s", "first_token_s", "finish_s"):
        assert closed[col].to_numpy() == pytest.approx(opened[col].to_numpy(), abs=1e-9), col


def test_the_api_server_delays_every_send_and_shows_in_ttft() -> None:
    tr = conv_slice(80, speed=8.0)
    on = simulate(make_config(), tr, clients=ClientSpec(4)).requests
    off = simulate(make_config(api_server_count=0), tr, clients=ClientSpec(4)).requests
    assert (on["api_ingress_s"] > 0).all() and (on["ttft_s"].median() > off["ttft_s"].median())
    assert in_flight(on).max() == 4
    q = on.sort_values("arrival_s")
    later = q["arrival_s"].to_numpy()[4:]
    sent_at = np.isin(later, q["finish_s"].to_numpy()) | np.isin(later, tr.df["arrival_s"].to_numpy())
    assert sent_at.all()  # each at a client finish, or at its own (later) trace time


def test_a_session_turn_goes_its_think_time_after_the_last_chunk_reaches_the_client() -> None:
    tr = make_trace([dict(arrival_s=0.0, prompt_tokens=10, output_tokens=3, session_id="s", turn=1, think_time_s=0.0),
                     dict(arrival_s=0.0, prompt_tokens=10, output_tokens=3, session_id="s", turn=2, think_time_s=0.25)])
    q = simulate(make_config(cost_model="constant:0.01", async_scheduling=False), tr).requests
    f0 = INGRESS + 0.03 + D + END
    assert q["finish_s"][0] == pytest.approx(f0, abs=1e-12)
    assert q["arrival_s"][1] == q["finish_s"][0] + 0.25
    assert q["engine_arrival_s"][1] == pytest.approx(f0 + 0.25 + INGRESS, abs=1e-12)


def test_sessions_client_times_are_the_after_the_run_rule_on_their_own_engine() -> None:
    """Think times send a later finish's turn before an earlier one's; the ingress FIFO stays in
    send order. Solving the run's own sends and engine times after the run, as an open loop is
    (ingress, then egress over the step ends), gives the times the run gave as it went."""
    from sim.frontend.egress import deliver
    from sim.frontend.ingress import ingress
    from sim.run.clients import sessions_of

    tr = session_trace(seed=4, sessions=24)
    res = simulate(make_config(block_size=16), tr)
    q, steps = res.requests, res.steps
    send = q["arrival_s"].to_numpy()
    prev = sessions_of(tr)[0]
    later = np.flatnonzero(prev >= 0)
    by_cause = later[np.argsort(q["finish_s"].to_numpy()[prev[later]], kind="stable")]
    assert (np.diff(send[by_cause]) < 0).any()  # a later finish's turn sent first
    ing = ingress(send, P.ingress_s(q["prompt_tokens"].to_numpy(), "chat"), np.arange(len(q)), 1)
    assert ing.engine_arrival_s == pytest.approx(q["engine_arrival_s"].to_numpy(), abs=1e-12)
    first = (q["first_token_s"] - q["api_first_egress_s"]).to_numpy()
    finish = (q["finish_s"] - q["api_egress_s"]).to_numpy()
    n = q["output_tokens"].to_numpy()
    ends = (steps["start_s"] + steps["duration_s"]).to_numpy()
    f, e = deliver(first, finish, n, n, ing.server, ing.busy, np.zeros(len(q), np.int64), [ends],
                   P.first_token_s("chat"), D, END)
    assert f == pytest.approx(q["first_token_s"].to_numpy(), abs=1e-9)
    assert e == pytest.approx(q["finish_s"].to_numpy(), abs=1e-9)
    assert (q["prefix_hit_tokens"] > 0).any()


def test_several_api_servers_and_fleets_are_refused_in_one_line(tmp_path: Path) -> None:
    tr = make_trace([dict(arrival_s=0.0, prompt_tokens=9, output_tokens=2)])
    with pytest.raises(ConfigError, match="with 2 API servers"):
        simulate(make_config(cost_model="constant:0.01", api_server_count=2), tr, clients=ClientSpec(2))
    cluster = tmp_path / "c.yaml"
    cluster.write_text("defaults: {cost_model: 'constant:0.01'}\ninstances: [{name: a, count: 2}]\n")
    code, text = kvsim("simulate", "--cluster", str(cluster), "--out", str(tmp_path / "r"), "--max-concurrency", "2")
    assert code == 2 and len(text.strip().splitlines()) == 1 and "a fleet's API servers" in text, text


def test_simulate_takes_max_concurrency_with_its_default_api_server(tmp_path: Path) -> None:
    code, text = kvsim("simulate", "--out", str(tmp_path / "r"), "--cost-model", "constant:0.01",
                       "--max-concurrency", "3")
    assert code == 0, text
    req = pd.read_parquet(tmp_path / "r" / "requests.parquet")
    assert in_flight(req).max() == 3 and (req["api_ingress_s"] > 0).all()
