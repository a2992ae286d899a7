"""A step that preempts stays inside its fast-forward window (sim/engine/fastforward/preempt.py):
the same run as exact steps, and whom the running pass preempts is worked out before anything
changes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sim.engine.fastforward.preempt import victims
from tests.helpers import assert_fast_forward_identical

PREEMPTS = {"num_gpu_blocks": 900, "max_model_len": 8192}  # async (the default), FCFS recompute


@pytest.mark.parametrize("kw", [{}, {"free_order": "tail"}, {"enable_prefix_caching": False},
                                {"async_scheduling": False}, {"async_scheduling": False, "free_order": "tail"}],
                         ids=["default", "keys-at-once", "no-caching", "sync", "sync-keys-at-once"])
def test_a_window_runs_the_steps_that_preempt_and_matches_exact_steps(bundled_trace: Any, kw: dict[str, Any]) -> None:
    ff = assert_fast_forward_identical({**PREEMPTS, **kw}, bundled_trace, check=True)
    s = ff.summary
    assert s.preemptions > 20, "the run must preempt for the test to say anything"
    assert s.num_steps - s.fast_forward_steps < s.preemptions // 4, "the windows ended at the preemptions"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_victims_that_share_prompt_blocks_free_only_their_last_references(bundled_trace: Any, sync: bool) -> None:
    """Two samples of each prompt (``n`` = 2) share its full blocks: a victim frees only the
    blocks no one else holds, and the window's count of what it frees must say so."""
    import dataclasses

    df = bundled_trace.df.copy()
    df["n"] = 2
    trace = dataclasses.replace(bundled_trace, df=df)
    ff = assert_fast_forward_identical({**PREEMPTS, "async_scheduling": not sync}, trace, check=True)
    s = ff.summary
    assert s.preemptions > 100 and s.prefix_cache.hit_rate > 0.3
    assert s.num_steps - s.fast_forward_steps < s.preemptions // 4


def test_kv_events_see_the_same_pool_operations_when_a_window_preempts(bundled_trace: Any) -> None:
    """A stale KV-aware view logs every store and delete of the pools' maps (sim/cluster/events.py):
    a live fleet routed by it is the same with and without fast-forward."""
    from tests.test_router_live import both

    ff = both({"num_gpu_blocks": 300, "max_model_len": 4096}, bundled_trace, "kv-aware:delay=0.5", n=2)
    assert sum(ff.preemptions) > 50 and sum(map(len, ff.steps)) - ff.ff_steps < sum(ff.preemptions) // 2


@pytest.mark.parametrize("kw", [{"victim": "fewest-tokens"}, {"preemption": "swap", "swap_space": 0.5}],
                         ids=["fewest-tokens", "swap"])
def test_other_victims_and_swap_still_end_the_window_before_the_step(bundled_trace: Any, kw: dict[str, Any]) -> None:
    ff = assert_fast_forward_identical({**PREEMPTS, **kw}, bundled_trace)
    s = ff.summary
    assert s.preemptions > 20 and s.num_steps - s.fast_forward_steps >= s.preemptions // 4


def _req(name: str, blocks: list[int]) -> Any:
    return SimpleNamespace(name=name, kv=SimpleNamespace(blocks=blocks))


def _pool(n: int = 16) -> list[int]:
    return [1] * n


def test_a_decoder_that_finds_no_block_preempts_the_end_of_running_then_itself() -> None:
    a, b, c, d = (_req(x, [i]) for i, x in enumerate("abcd"))
    running = [a, b, c, d]
    # b takes the free block; d finds none: the end of running is d itself
    assert victims(running, [b, d], [], 1, _pool(), 4) == [d]
    # a finds none: d goes (1 block), a takes it; b finds none: c goes, b takes its block
    assert victims(running, [a, b], [], 0, _pool(), 4) == [d, c]


def test_a_shared_block_is_not_freed_by_one_victim() -> None:
    a, b = _req("a", [0]), _req("b", [1])
    c, d = _req("c", [2, 3]), _req("d", [4])
    ref = _pool()
    ref[4] = 2  # d's block is held by another request too: preempting d frees nothing
    assert victims([a, b, c, d], [a], [], 0, ref, 4) == [d, c]
    shared = _req("e", [4])  # two victims share a block: the second frees it
    ref[4] = 2
    assert victims([a, shared, d], [a], [], 0, ref, 3) == [d, shared]


def test_the_window_does_not_apply_a_step_it_cannot_represent() -> None:
    a, b, c = (_req(x, [i]) for i, x in enumerate("abc"))
    # the victim's last token is in flight: it would finish from the waiting queue
    assert victims([a, b, c], [a], [c], 0, _pool(), 2) is None
    # every decoder would be preempted: the exact loop launches no step then
    assert victims([a], [a], [], 0, _pool(), 1) is None
    # b's block is shared: preempting it frees nothing, a preempts itself, and nobody runs
    assert victims([a, b], [a, b], [], 0, [1, 2, 2], 2) is None
