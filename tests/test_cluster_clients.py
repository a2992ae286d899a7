"""Closed-loop clients behind a cluster's router (issue 49; sim/cluster/sends.py).

A one-instance cluster must send and time every request as one replica does (``simulate``'s
closed loop, itself checked by hand in tests/test_closed_loop.py); across instances the loop's
rules hold per request: at most N in flight, a send at the trace's time or at a finish, a turn
``think_time_s`` after its previous turn's last token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from sim.cluster.disagg import run_cluster
from sim.cluster.spec import parse_cluster
from sim.config import make_config
from sim.run.clients import ClientSpec
from sim.run.simulate import simulate
from tests.conftest import make_trace
from tests.helpers import conv_slice, in_flight, kvsim, session_trace
from tests.test_disagg import cluster as pd_cluster

CONST = {"model": "llama-3.1-8b", "cost_model": "constant:0.01", "api_server_count": 0, "async_scheduling": False}


def fleet(n: int, trace: Any, slots: int | None, router: str = "least-outstanding-tokens") -> pd.DataFrame:
    spec = parse_cluster({"router": router, "instances": [{"name": "r", "count": n}]}, "test", CONST)
    return run_cluster(spec, trace, clients=ClientSpec(slots)).requests


@pytest.mark.parametrize(("slots", "sessions"), [(1, False), (4, False), (None, True)])
def test_one_instance_cluster_sends_and_times_as_one_replica(slots: int | None, sessions: bool) -> None:
    tr = session_trace() if sessions else conv_slice(60, speed=20.0)
    one = simulate(make_config(**CONST), tr, clients=ClientSpec(slots)).requests
    got = fleet(1, tr, slots)
    cols = [c for c in one.columns if c in got.columns]
    assert {"arrival_s", "first_token_s", "finish_s", "prefix_hit_tokens"} <= set(cols)
    pd.testing.assert_frame_equal(got[cols], one[cols], check_exact=True)
    assert (one["arrival_s"] > tr.df["arrival_s"]).any(), "nothing waited for a client: the test proves nothing"


def test_across_instances_at_most_n_in_flight_each_sent_at_its_time_or_a_finish() -> None:
    tr = conv_slice(60, speed=20.0)
    req = fleet(3, tr, 5)
    assert (req["status"] == "finished").all()
    assert req["instance"].nunique() == 3  # the router spread the sends
    assert in_flight(req).max() == 5
    sent, own = req["arrival_s"].to_numpy(), tr.df["arrival_s"].to_numpy()
    late = sent > own
    assert (sent >= own).all() and late.any()
    assert np.isin(sent[late], req["finish_s"].to_numpy()).all()


def test_across_instances_a_turn_goes_its_think_time_after_the_last_token() -> None:
    tr = session_trace()
    req = fleet(3, tr, None, router="kv-aware")
    df = tr.df
    assert (req["status"] == "finished").all() and req["instance"].nunique() > 1
    for _, s in df.groupby("session_id"):
        s = s.sort_values("turn")
        uids = s.index.to_numpy()
        prev, nxt = req.loc[uids[:-1]], req.loc[uids[1:]]
        want = prev["finish_s"].to_numpy() + s["think_time_s"].to_numpy()[1:]
        assert (nxt["arrival_s"].to_numpy() == want).all()
    assert req["prefix_hit_tokens"].sum() > 0  # later turns found their session's blocks


@pytest.mark.parametrize("flow", ["decode-first", "prefill-first"])
def test_prefill_decode_one_slot_sends_each_request_as_the_last_one_finishes(flow: str) -> None:
    """One slot, 1P1D (0.1 s a step): a request is sent the instant the previous one's last token
    leaves its decode instance, and a prompt the decode side rejects frees the slot when it is
    rejected (the third prompt, 300 tokens, over the decode side's max_model_len of 256)."""
    spec = parse_cluster(pd_cluster(flow=flow, decode={"max_model_len": 256}))
    prompts = [100, 120, 300, 80]
    req = run_cluster(spec, make_trace([{"arrival_s": 0.0, "prompt_tokens": p, "output_tokens": 4}
                                        for p in prompts]), clients=ClientSpec(1)).requests
    assert req["status"].tolist() == ["finished", "finished", "rejected", "finished"]
    assert (req["prefill_instance"] == 0).all()  # every prompt went through the prefill instance
    left = req["finish_s"].where(req["status"] == "finished")
    # r2 leaves when its prompt is done and the decode side refuses it: r3 is sent then
    assert req["arrival_s"].iloc[1] == left.iloc[0] and req["arrival_s"].iloc[2] == left.iloc[1]
    assert req["arrival_s"].iloc[3] == req["prefill_done_s"].iloc[2]
    assert in_flight(req.assign(finish_s=left.fillna(req["prefill_done_s"]))).max() == 1


def test_prefill_decode_at_most_n_in_flight_and_a_prompt_rejected_on_prefill_frees_its_slot() -> None:
    spec = parse_cluster(pd_cluster(n_prefill=2, prefill={"max_model_len": 200}))
    rows = [{"arrival_s": 0.0, "prompt_tokens": 150 if i % 5 else 260, "output_tokens": 3 + i % 7} for i in range(40)]
    req = run_cluster(spec, make_trace(rows), clients=ClientSpec(6)).requests
    gone = req["status"] == "rejected"
    assert gone.sum() == 8 and (req.loc[gone, "reject_reason"] == "max_model_len").all()
    assert (req.loc[~gone, "status"] == "finished").all()
    assert in_flight(req.assign(finish_s=req["finish_s"].where(~gone, req["arrival_s"]))).max() == 6
    # the first six go at 0; the prefill instance rejects r0 and r5 (260 tokens) as it takes them
    # at 0, and their slots go to r6 and r7 at once
    assert (req["arrival_s"] == 0).sum() == 8


def test_simulate_cluster_with_max_concurrency_records_its_clients(tmp_path: Path) -> None:
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump({"defaults": CONST, "instances": [{"name": "a", "count": 2}]}))
    code, text = kvsim("simulate", "--cluster", str(cluster), "--out", str(tmp_path / "r"),
                       "--cost-model", "constant:0.01", "--api-server-count", "0", "--max-concurrency", "3")
    assert code == 0, text
    import json

    doc = json.loads((tmp_path / "r" / "cluster.json").read_text())
    assert doc["clients"]["max_concurrency"] == 3
    req = pd.read_parquet(tmp_path / "r" / "requests.parquet")
    assert in_flight(req).max() == 3


def test_simulate_cluster_with_sessions_gives_no_open_loop_prefix_bounds(tmp_path: Path) -> None:
    """The fleet's prefix bounds read prompts in row order, which a session trace does not send in:
    the summary leaves them out rather than print bounds of another workload."""
    from tests.helpers import write_sessions

    cluster, trace = tmp_path / "c.yaml", tmp_path / "s.jsonl"
    cluster.write_text(yaml.safe_dump({"defaults": {**CONST, "block_size": 16}, "instances": [{"name": "a", "count": 2}]}))
    write_sessions(trace)
    code, text = kvsim("simulate", str(trace), "--cluster", str(cluster), "--out", str(tmp_path / "r"),
                       "--cost-model", "constant:0.01", "--api-server-count", "0")
    assert code == 0, text
    import json

    doc = json.loads((tmp_path / "r" / "cluster.json").read_text())
    assert doc["prefix_bounds"] is None and doc["clients"]["sessions"] is True
    assert "the trace allows" not in text
