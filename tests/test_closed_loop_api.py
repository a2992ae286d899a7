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
from tests.helpers import conv_slice
from tests.test_closed_loop import in_flight, kvsim, session_trace

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


@pytest.mark.parametrize("what, kw, match", [
    ("servers", {"api_server_count": 2}, "with 2 API servers"),
    ("sessions", {}, "a session trace behind an API server"),
])
def test_what_is_not_modelled_behind_an_api_server_is_refused(what: str, kw: dict, match: str) -> None:
    tr = session_trace(sessions=3) if what == "sessions" else make_trace([dict(arrival_s=0.0, prompt_tokens=9,
                                                                                output_tokens=2)])
    with pytest.raises(ConfigError, match=match):
        simulate(make_config(cost_model="constant:0.01", **kw), tr,
                 clients=None if what == "sessions" else ClientSpec(2))


def test_simulate_takes_max_concurrency_with_its_default_api_server(tmp_path: Path) -> None:
    code, text = kvsim("simulate", "--out", str(tmp_path / "r"), "--cost-model", "constant:0.01",
                       "--max-concurrency", "3")
    assert code == 0, text
    req = pd.read_parquet(tmp_path / "r" / "requests.parquet")
    assert in_flight(req).max() == 3 and (req["api_ingress_s"] > 0).all()
