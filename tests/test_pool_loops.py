"""The block pool's compiled loops (``sim/kv/_pool_loops.c``) are the Python loops, faster.

``tests/test_block_pool.py`` runs its model-based sequences with both; here, whole simulations
with both must give the same requests, steps and freed block tables, and the compiled loops
must fail like Python on a bad block id instead of reading memory. Skipped, with the reason,
where the extension was not built.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pandas as pd
import pytest

from sim.config import make_config
from sim.kv import block_pool
from sim.kv.block_pool import BlockPool
from sim.run.simulate import simulate
from tests.helpers import BUNDLED, freed_tables, mooncake_slice, pool_loops, same_either_way
from workloads import load_trace


def bundled_trace() -> Any:
    return load_trace(BUNDLED)


def run_with(monkeypatch: pytest.MonkeyPatch, which: str, trace: Any, **cfg: Any) -> Any:
    monkeypatch.setattr(block_pool, "LOOPS", pool_loops(which))
    return freed_tables(lambda: simulate(make_config(**cfg), trace, check=True))


@pytest.mark.parametrize(("trace", "cfg"), [
    (bundled_trace, {"max_model_len": 4096, "num_gpu_blocks": 300}),  # no content: unpublished blocks, preemptions
    (mooncake_slice, {"max_model_len": 8192, "num_gpu_blocks": 3000}),  # shared prefixes: hits and evictions
    (lambda: mooncake_slice(20), {"max_model_len": 8192, "num_gpu_blocks": 1000, "exact_steps": True}),
    (bundled_trace, {"max_model_len": 4096, "num_gpu_blocks": 300, "enable_prefix_caching": False}),
], ids=["conv-preempting", "mooncake-prefix", "mooncake-exact", "no-caching"])
def test_a_simulation_is_the_same_with_compiled_and_python_loops(
        monkeypatch: pytest.MonkeyPatch, trace: Any, cfg: dict[str, Any]) -> None:
    _, tables = same_either_way(monkeypatch, (block_pool, "LOOPS"), pool_loops, trace(), **cfg)
    assert len(tables) > 0


def test_the_workloads_above_reach_the_branches_they_are_named_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The identity test above proves something only if the runs preempt and evict."""
    res, _ = run_with(monkeypatch, "compiled", bundled_trace(), max_model_len=4096, num_gpu_blocks=300)
    assert res.summary.preemptions > 0
    res, _ = run_with(monkeypatch, "compiled", mooncake_slice(), max_model_len=8192, num_gpu_blocks=3000)
    assert res.summary.evictions > 0 and res.summary.prefix_cache.hits > 0


def test_a_bad_block_id_raises_instead_of_reading_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_pool, "LOOPS", pool_loops("compiled"))
    pool = BlockPool(8)
    got = pool.get_new_blocks(3)
    with pytest.raises(IndexError, match="block id 99 out of range"):
        pool.release([99])
    with pytest.raises(IndexError, match="out of range"):
        pool.release([-1])
    with pytest.raises(TypeError):
        pool.release([object()])  # type: ignore[list-item]
    pool.release(got)
    pool.check()


def test_a_pool_with_compiled_loops_copies_and_pickles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps copy pools and Ray ships them: the loops travel as functions named by module."""
    monkeypatch.setattr(block_pool, "LOOPS", pool_loops("compiled"))
    pool = BlockPool(16)
    pool.get_new_blocks(5)
    front = pool.free_queue.to_list()[:4]
    for other in (copy.deepcopy(pool), pickle.loads(pickle.dumps(pool))):
        assert other._pop_front is not None, "the copy fell back to the Python loops"
        assert other.free_queue.to_list() == pool.free_queue.to_list()
        assert other.get_new_blocks(4) == front
        other.check()


def test_a_map_that_logs_its_deletes_sees_every_eviction_with_compiled_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """KV events (a stale precise router view) keep the pool's map as a dict subclass that logs
    stores and deletes; the compiled pops delete through its own ``del``, as Python does (C's
    plain dict calls would bypass it)."""
    from sim.cluster.events import _EventedCache

    logs = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(block_pool, "LOOPS", pool_loops(which))
        pool, events = BlockPool(8), []
        pool.cache = _EventedCache({}, events.append, lambda: 0.0)
        got = pool.get_new_blocks(3)
        for j, b in enumerate(got):
            pool.cache_block(b, 100 + j)
        pool.release(got)
        pool.get_new_blocks(7)  # every free block: the three hashed ones are evicted
        pool.check()
        logs.append(events)
    assert logs[0] == logs[1]
    assert [stored for _, _, stored in logs[0]].count(False) == 3


def test_a_stale_kv_aware_router_routes_the_same_with_compiled_and_python_loops(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet-level consequence: the stale view reads the logged evictions."""
    from sim.cluster.replay import replay_fleet
    from sim.kv import paged_prefix
    from tests.helpers import table_loops

    cfg = make_config(max_model_len=8192, num_gpu_blocks=1500)
    out = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(block_pool, "LOOPS", pool_loops(which))
        monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops(which))
        out.append(replay_fleet([cfg] * 2, mooncake_slice(), "kv-aware:delay=0.5"))
    pd.testing.assert_frame_equal(out[0].requests, out[1].requests, check_exact=True)
    assert min(out[0].evictions) > 0, "no eviction: the stale view had nothing to miss"
