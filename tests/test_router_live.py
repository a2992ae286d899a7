"""Live routing keeps fast-forward: a fleet whose router reads replica state at every arrival
gives bit-identical outputs with and without ``--exact-steps`` (sim/cluster/router.py)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from sim.cluster.replay import FleetResult, replay_fleet
from sim.config.schema import make_config
from tests.conftest import make_trace
from tests.helpers import BUNDLED, mooncake_slice


def azure(n: int = 240, speed: float = 3.0) -> Any:
    """The bundled Azure conv slice, first ``n`` rows, arrivals ``speed`` x faster (load)."""
    from workloads import load_trace

    df = load_trace(BUNDLED).df.head(n).copy()
    df["arrival_s"] = (df["arrival_s"] - df["arrival_s"].iloc[0]) / speed
    return make_trace(df.to_dict("records"))


def ties(n: int = 120) -> Any:
    """Arrivals on a 0.05 s grid with a constant 0.01 s step: arrivals land exactly on step ends."""
    rows = [{"arrival_s": 0.05 * (i // 2), "prompt_tokens": 40 + 37 * (i % 7), "output_tokens": 5 + 3 * (i % 5)}
            for i in range(n)]
    return make_trace(rows)


def both(cfg_kw: dict[str, Any], trace: Any, router: str, n: int = 3) -> FleetResult:
    ff = replay_fleet([make_config(**cfg_kw, exact_steps=False)] * n, trace, router)
    ex = replay_fleet([make_config(**cfg_kw, exact_steps=True)] * n, trace, router)
    assert ff.ff_steps > 0, "no step was fast-forwarded: the test proves nothing"
    assert ex.ff_steps == 0
    pd.testing.assert_frame_equal(ff.requests, ex.requests, check_exact=True)
    for a, b in zip(ff.steps, ex.steps, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert ff.evictions == ex.evictions
    assert ff.requests["replica"].nunique() == n   # the router spread the load
    return ff


CASES = [
    ("paged-sync-lot", {"async_scheduling": False, "num_gpu_blocks": 900, "max_model_len": 8192},
     "azure", "least-outstanding-tokens"),
    ("paged-async-lot", {"num_gpu_blocks": 900, "max_model_len": 8192}, "azure", "least-outstanding-tokens"),
    ("slab-kv-aware", {"allocator": "slab", "kv_memory": "1GiB", "max_model_len": 4096, "async_scheduling": False},
     "azure", "kv-aware:queue=2,kv=1,load=1"),
    ("offload-kv-aware", {"num_gpu_blocks": 400, "block_size": 8, "max_model_len": 3192,
                          "kv_offloading_size": 0.05}, "azure", "kv-aware"),
    ("mooncake-precise", {"gpu": "h200", "num_gpu_blocks": 1500, "max_model_len": 8192,
                          "async_scheduling": False, "serving_stack": "vllm-2023"}, "mooncake", "kv-aware"),
    ("mooncake-stale-async", {"gpu": "h200", "num_gpu_blocks": 1500, "max_model_len": 8192},
     "mooncake", "kv-aware:view=precise,delay=0.5,kv=1"),
    ("mooncake-approx-dynamo", {"gpu": "h200", "num_gpu_blocks": 1200, "max_model_len": 8192,
                                "async_scheduling": False}, "mooncake", "dynamo:view=approximate,delay=0.2"),
    ("priority-dynamo", {"policy": "priority", "num_gpu_blocks": 700, "max_model_len": 8192}, "azure", "dynamo"),
    ("ties-sync", {"cost_model": "constant:0.01", "async_scheduling": False, "num_gpu_blocks": 300,
                   "max_model_len": 2048}, "ties", "least-outstanding-tokens"),
    ("ties-async", {"cost_model": "constant:0.01", "num_gpu_blocks": 300, "max_model_len": 2048},
     "ties", "kv-aware:queue=1,load=1"),
]


@pytest.mark.parametrize("name, cfg_kw, trace, router", CASES, ids=[c[0] for c in CASES])
def test_live_routing_fast_forward_is_bit_identical(name: str, cfg_kw: dict[str, Any], trace: str,
                                                    router: str) -> None:
    tr = {"azure": azure, "mooncake": lambda: mooncake_slice(120), "ties": ties}[trace]()
    if trace == "azure" and "priority" in name:
        df = tr.df.copy()
        df["priority"] = df.index % 3
        tr = make_trace(df.to_dict("records"))
    both(cfg_kw, tr, router)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_window_waits_for_the_router_instead_of_ending(sync: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live router's arrival pauses every replica's window (sim/engine/fastforward/pause.py)
    instead of ending it: the same outputs, and far fewer steps left to the exact loop than when
    each arrival ends every window."""
    from sim.engine.replica import Replica

    cfg = make_config(num_gpu_blocks=900, max_model_len=8192, async_scheduling=not sync)
    tr = azure()
    paused = replay_fleet([cfg] * 3, tr, "least-outstanding-tokens")
    follow = Replica.follow_router
    monkeypatch.setattr(Replica, "follow_router", lambda self, nxt, **_: follow(self, nxt))
    ended = replay_fleet([cfg] * 3, tr, "least-outstanding-tokens")
    pd.testing.assert_frame_equal(paused.requests, ended.requests, check_exact=True)
    for a, b in zip(paused.steps, ended.steps, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    total = sum(len(s) for s in paused.steps)
    exact_paused, exact_ended = total - paused.ff_steps, total - ended.ff_steps
    assert exact_paused * 2 < exact_ended, (exact_paused, exact_ended)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_sleeping_replicas_outstanding_tokens_are_served_from_its_cache_and_always_fresh(
        sync: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The router reads every replica at every arrival; a lazily read replica counts its
    requests' outstanding tokens once between two runs of its loop (sim/engine/resumes.py). Every
    read served from that count equals a count made afresh at that read, and many reads are."""
    from sim.engine.replica import Replica

    count = Replica.outstanding_tokens.fget
    served: list[bool] = []  # per read: served from the cache

    def checked(self: Replica) -> int:
        cached = self._ot is not None
        v = count(self)
        self._ot = None
        fresh = count(self)
        assert v == fresh, (self.env.now, v, fresh)
        served.append(cached)
        return v

    monkeypatch.setattr(Replica, "outstanding_tokens", property(checked))
    # every read through the property: an idle replica's is otherwise answered by its flag
    # (tests/test_fleet_router.py checks that one)
    monkeypatch.setattr(Replica, "idle", property(lambda self: False, lambda self, v: None), raising=False)
    monkeypatch.setattr(Replica, "surely_busy", property(lambda self: False, lambda self, v: None), raising=False)
    tie = ties()
    for kw, trace in (({"num_gpu_blocks": 900, "max_model_len": 8192}, azure(speed=1.5)),
                      ({"cost_model": "constant:0.01", "num_gpu_blocks": 300, "max_model_len": 2048}, tie)):
        served.clear()  # (ties: two arrivals an instant, the second read after the first's submission)
        res = replay_fleet([make_config(**kw, async_scheduling=not sync)] * 4, trace, "least-outstanding-tokens")
        assert res.requests["status"].eq("finished").all()
        assert sum(served) > len(served) // (4 if trace is not tie else 100), (sum(served), len(served))
