"""P/D instances fast-forward in lockstep (sim/engine/fastforward/lockstep.py): every output of
a cluster run is bit-identical to ``--exact-steps``, and the decode instances' steps are
really applied by windows (not handed back to the exact loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sim.cluster.disagg import ClusterRun
from sim.cluster.spec import parse_cluster
from workloads import load_trace
from workloads.schema import Trace

MOONCAKE = Path(__file__).resolve().parents[1] / "workloads" / "data" / "mooncake_conv_slice.jsonl"


@pytest.fixture(scope="module")
def slice_() -> Trace:
    t = load_trace(MOONCAKE)
    return Trace(df=t.df.iloc[:160].reset_index(drop=True), path=t.path, format=t.format)


def spec(exact: bool, *, flow: str = "decode-first", decode: dict[str, Any] | None = None, threshold: int = 0,
         router: str = "least-outstanding-tokens", **defaults: Any) -> Any:
    return parse_cluster({
        "flow": flow, "threshold": threshold, "router": router,
        "defaults": {"model": "llama-3.1-8b", "gpu": "h100", "max_num_batched_tokens": 2048,
                     "exact_steps": exact, **defaults},
        "instances": [{"name": "p", "role": "prefill", "count": 2},
                      {"name": "d", "role": "decode", "count": 2, "config": decode or {}}]})


def run(trace: Trace, exact: bool, **kw: Any) -> tuple[pd.DataFrame, pd.DataFrame, int, int]:
    c = ClusterRun(spec(exact, **kw), trace)
    res = c.run()
    decode = [r for r in c.reps if r.kernel.kv.connector is not None and not c.senders.get(c.reps.index(r))]
    windows = sum(r.kernel.ff_steps for r in decode)
    return res.requests, res.steps, windows, res.decode_kv_blocked


CASES = {
    "decode-first": {},
    "prefill-first": {"flow": "prefill-first"},
    "tight decode pool": {"decode": {"num_gpu_blocks": 2200, "max_model_len": 32768}},
    "threshold rule": {"threshold": 4096},
    "sync scheduling, kv-aware router": {"async_scheduling": False, "router": "kv-aware"},
    "dynamo router (per-request counts)": {"router": "dynamo"},
    "constant step time (ties at every instant)": {"cost_model": "constant:0.02", "api_server_count": 0},
}


@pytest.mark.parametrize("case", CASES)
def test_lockstep_windows_are_bit_identical_to_exact_steps(slice_: Trace, case: str) -> None:
    kw = CASES[case]
    req_x, steps_x, win_x, blocked_x = run(slice_, True, **kw)
    req_f, steps_f, win_f, blocked_f = run(slice_, False, **kw)
    assert win_x == 0 and win_f > len(steps_f) // 4  # the decode instances stepped in windows
    pd.testing.assert_frame_equal(req_f, req_x)
    pd.testing.assert_frame_equal(steps_f, steps_x)
    assert blocked_f == blocked_x
    assert (req_f["status"] == "finished").sum() > 0


def test_tight_decode_pool_makes_pulls_wait(slice_: Trace) -> None:
    """The planted pressure case above is one: some pulls wait for free decode blocks."""
    assert run(slice_, False, **CASES["tight decode pool"])[3] > 0
