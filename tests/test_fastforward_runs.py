"""Runs of quiet steps laid out as arrays (sim/engine/fastforward/runs.py) equal the window's
quiet steps one at a time: ``MIN_RUN`` is lowered so that short runs are taken too, and every
configuration must match ``--exact-steps`` frame for frame, with runs really committed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import sim.engine.fastforward.runs as runs
from tests.helpers import BUNDLED, assert_fast_forward_identical, mooncake_slice
from tests.test_router_live import CASES, azure, both


def count_commits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps of each run commit from now on, in order."""
    seen: list[int] = []
    commit = runs.QuietRuns._commit

    def count(self: runs.QuietRuns, a: int, b: int, ops: bool = True) -> None:
        seen.append(b - a)
        commit(self, a, b, ops)

    monkeypatch.setattr(runs.QuietRuns, "_commit", count)
    return seen


@pytest.fixture
def committed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Steps committed by runs during the test (MIN_RUN lowered to 2)."""
    monkeypatch.setattr(runs, "MIN_RUN", 2)
    return count_commits(monkeypatch)


@pytest.mark.parametrize("kw", [
    dict(model="llama-3.1-8b", gpu="h100"),
    dict(model="llama-3.1-8b", gpu="h100", async_scheduling=False),
    dict(model="llama-3.1-8b", gpu="h100", block_size=4, max_num_batched_tokens=512),
    dict(num_gpu_blocks=900, max_model_len=8192),                       # preempts: runs end before it
    dict(num_gpu_blocks=900, max_model_len=8192, async_scheduling=False, enable_prefix_caching=False),
], ids=["async", "sync", "block4-chunked", "tight-async", "tight-sync-nocache"])
def test_runs_equal_exact_steps(committed: list[int], kw: dict[str, Any]) -> None:
    from workloads import load_trace

    # invariants checked every step where the pool is small (a check walks the whole pool)
    assert_fast_forward_identical(kw, load_trace(BUNDLED), check="num_gpu_blocks" in kw)
    assert sum(committed) > 100, "no run was committed: the test proves nothing"


@pytest.mark.parametrize("name, cfg_kw, trace, router",
                         [c for c in CASES if c[0] in ("paged-sync-lot", "paged-async-lot", "priority-dynamo",
                                                       "mooncake-stale-async")],
                         ids=lambda c: c if isinstance(c, str) else "")
def test_runs_pause_for_a_live_router_as_steps_do(committed: list[int], name: str, cfg_kw: dict[str, Any],
                                                  trace: str, router: str) -> None:
    tr = {"azure": azure, "mooncake": lambda: mooncake_slice(120)}[trace]()
    both(cfg_kw, tr, router)
    assert sum(committed) > 50, "no run was committed: the test proves nothing"


def test_default_runs_are_taken_on_a_light_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default MIN_RUN, a lightly loaded fleet (few decoders, long gaps) lays runs out."""
    seen = count_commits(monkeypatch)
    ff = both({"model": "llama-3.1-8b", "gpu": "h100"}, azure(120, speed=0.5), "least-outstanding-tokens", n=4)
    assert sum(seen) > ff.ff_steps / 2


LAZY = [c for c in CASES if c[0] in ("paged-sync-lot", "paged-async-lot", "ties-sync")] + [
    ("ties-async-lot", {"cost_model": "constant:0.01", "num_gpu_blocks": 300, "max_model_len": 2048},
     "ties", "least-outstanding-tokens"),
    ("offload-lot", {"num_gpu_blocks": 400, "block_size": 8, "max_model_len": 3192, "kv_offloading_size": 0.05},
     "azure", "least-outstanding-tokens")]


@pytest.mark.parametrize("name, cfg_kw, trace, router", LAZY, ids=[c[0] for c in LAZY])
def test_lazy_runs_sleep_through_a_totals_router(committed: list[int], monkeypatch: pytest.MonkeyPatch,
                                                 name: str, cfg_kw: dict[str, Any], trace: str, router: str) -> None:
    """A router that reads only outstanding tokens reads a run's sums from its laid-out step
    ends while the replica naps (sim/engine/fastforward/pause.py, lazy reads): outputs equal
    ``--exact-steps``, and submissions really cut naps short."""
    from sim.engine.replica import Replica
    from tests.test_router_live import ties

    naps: list[bool] = []  # per nap: woken before its end
    nap = Replica._nap

    def count(self: Replica, n: Any) -> Any:
        yield from nap(self, n)
        naps.append(self.env.now < n.until)

    monkeypatch.setattr(Replica, "_nap", count)
    tr = {"azure": azure, "ties": ties}[trace]()
    both(cfg_kw, tr, router)
    assert len(naps) > 10 and any(naps), (len(naps), sum(naps))


@pytest.mark.parametrize("B", [1, 4, 16])
def test_a_run_stops_at_the_first_step_whose_pops_exceed_the_free_blocks(B: int) -> None:
    """``_first_short`` against a step-by-step count: buckets take their blocks once every
    ``B`` steps from their first offset; the run may hold the steps before the first one whose
    pops leave the free blocks negative, and no more."""
    rng = np.random.default_rng(B)
    for _ in range(300):
        offs = sorted(rng.choice(range(1, B + 1), size=int(rng.integers(1, B + 1)), replace=False).tolist())
        firsts = [(j0, int(rng.integers(1, 4))) for j0 in offs]
        free = int(rng.integers(0, 60))
        taken, step = 0, 0
        while taken <= free:
            step += 1
            taken += sum(n for j0, n in firsts if (step - j0) % B == 0)
        assert runs._first_short(firsts, B, free) == step - 1


def test_a_commit_whose_laid_out_busy_sums_do_not_apply_sums_step_by_step(
        committed: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A run lays out the busy time after each step from the busy time at its start; a commit
    that starts elsewhere (the laid-out sums do not apply) adds the durations one by one. Both
    give ``--exact-steps``' busy time bit for bit: here every laid-out sum is made wrong, so
    only the step-by-step path can pass."""
    from workloads import load_trace

    build, used = runs.QuietRuns._build, []

    def wrong_sums(self: runs.QuietRuns, *a: Any) -> bool:
        ok = build(self, *a)
        if ok:
            self.busy = (np.asarray(self.busy) + 1e-3).data  # no commit can start from these
            used.append(1)
        return ok

    monkeypatch.setattr(runs.QuietRuns, "_build", wrong_sums)
    assert_fast_forward_identical(dict(model="llama-3.1-8b", gpu="h100"), load_trace(BUNDLED))
    assert used and sum(committed) > 100
