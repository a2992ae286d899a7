"""The paged allocator's per-request loops (``sim/kv/table_loops.py``, compiled by Cython where a
C compiler is, else run as Python: CI runs this file both ways): a new block for each decoder
crossing a boundary, the marks (or keys) of the blocks decoders fill, a table's take and marks,
a preempted request's publish and probe.

The one-call paths (``cross_boundary``'s :func:`~sim.kv.table_loops.cross`, ``allocate``'s
:func:`~sim.kv.table_loops.grow`) must leave what the methods they stand for leave, called one
by one (as a subclass that does not say its methods are plain gets them); whole simulations
with either must give the same requests, steps and freed block tables.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pandas as pd
import pytest

from sim.kv import table_loops
from sim.kv.block_pool import UNPUBLISHED
from sim.kv.hashing import UNIQUE_BASE
from sim.kv.paged import PagedAllocator
from tests.helpers import BUNDLED, freed_tables, mooncake_slice, req
from workloads import load_trace


class OneByOne(PagedAllocator):
    """The base class's methods, taken one by one: no fused call (a subclass that does not say
    ``plain_methods``)."""


def pool_state(kv: PagedAllocator) -> tuple[Any, ...]:
    """What two paths must leave alike in the pool: hashes, the prefix map, ref counts, the free
    queue (order and size)."""
    pool = kv.pool
    return list(pool.block_hash), dict(pool.cache), list(pool.ref), pool.free_queue.to_list(), pool.free_queue.size


def allocator_with_decoders(cls: type[PagedAllocator], lazy: bool) -> tuple[PagedAllocator, list[Any]]:
    """Five requests without content (three at a block's last token) and one with content,
    each holding its prompt's blocks, the blocks before its last registered."""
    kv = cls(64, 4, free_order="front-tail" if lazy else "tail")
    reqs = [req(i, p) for i, p in enumerate((7, 8, 11, 3, 12))] + [req(9, 7, ids=tuple(range(7)))]
    for r in reqs:
        assert kv.allocate(r, r.num_tokens)
        r.num_computed_tokens = r.num_tokens
    kv.append_block(reqs[:4])  # one block each, popped together
    return kv, reqs


def hogged(cls: type[PagedAllocator], lazy: bool) -> tuple[PagedAllocator, list[Any], Any]:
    """:func:`allocator_with_decoders`, and a request holding every free block: only blocks
    freed after it are left to pop."""
    kv, reqs = allocator_with_decoders(cls, lazy)
    hog = req(30, 4 * kv.num_free_blocks)
    assert kv.allocate(hog, hog.num_tokens)
    return kv, reqs, hog


@pytest.mark.parametrize(("trace", "cfg"), [
    (lambda: load_trace(BUNDLED), {"max_model_len": 4096, "num_gpu_blocks": 300}),  # marks, preemptions
    (lambda: load_trace(BUNDLED), {"max_model_len": 4096, "num_gpu_blocks": 300, "async_scheduling": False}),
    (lambda: load_trace(BUNDLED), {"max_model_len": 4096, "num_gpu_blocks": 300, "free_order": "tail"}),
    (mooncake_slice, {"max_model_len": 8192, "num_gpu_blocks": 3000}),  # content: the allocator's own path
], ids=["conv-async", "conv-sync", "conv-keys-not-marks", "mooncake-prefix"])
def test_a_simulation_is_the_same_with_the_one_call_paths_and_without(trace: Any, cfg: dict[str, Any]) -> None:
    from sim.config import make_config
    from sim.run import build
    from sim.run.simulate import simulate

    runs = []
    for cls in (PagedAllocator, OneByOne):
        plain, build.PagedAllocator = build.PagedAllocator, cls  # type: ignore[misc]  # the run's class, swapped
        try:
            runs.append(freed_tables(lambda: simulate(make_config(**cfg), trace(), check=True)))
        finally:
            build.PagedAllocator = plain  # type: ignore[misc]  # and put back
    (fused, f_tables), (one, o_tables) = runs
    assert fused.summary.fast_forward_steps > 0, "no window ran: the loops were not reached"
    pd.testing.assert_frame_equal(fused.requests, one.requests, check_exact=True)
    pd.testing.assert_frame_equal(fused.steps, one.steps, check_exact=True)
    assert f_tables == o_tables, "the same requests freed other blocks"


@pytest.mark.parametrize("lazy", [True, False], ids=["marks", "keys"])
@pytest.mark.parametrize("ahead", [0, 1])
def test_register_decoded_blocks_marks_or_keys_each_filled_block(lazy: bool, ahead: int) -> None:
    kv, reqs = allocator_with_decoders(PagedAllocator, lazy)
    before = [r.kv.num_registered for r in reqs]
    kv.register_decoded_blocks(reqs, ahead)
    kv.check(reqs)
    marked = kv.pool.block_hash.count(UNPUBLISHED)
    assert (marked > 0) == lazy, "the workload reaches the marking branch (lazy) and only then"
    for r, n in zip(reqs, before, strict=True):
        assert r.kv.num_registered == max(n, (r.num_computed_tokens + ahead) // 4)


@pytest.mark.parametrize("lazy", [True, False], ids=["marks", "keys"])
@pytest.mark.parametrize("ahead", [None, 0])
def test_a_block_boundary_in_one_call_leaves_what_append_and_register_leave(lazy: bool, ahead: int | None) -> None:
    """``cross_boundary``: the one call (pops, appends, marks or keys) against ``append_block``
    then ``register_decoded_blocks``, on a pool whose free blocks still carry hashes, so that
    the pops evict."""
    states = []
    for cls in (PagedAllocator, OneByOne):
        kv, reqs, hog = hogged(cls, lazy)
        assert (kv.cross_call() is not None) == (cls is PagedAllocator)
        for r in reqs[4:]:
            kv.free(r)  # finished: their hashed blocks go to the free queue
        crossing = reqs[:3]
        for r in crossing:
            r.num_computed_tokens = 4 * len(r.kv.blocks) - (0 if ahead is None else ahead)
        before = kv.evictions
        kv.cross_boundary(crossing, ahead)
        states.append((*pool_state(kv), kv.evictions - before,
                       [(list(r.kv.blocks), r.kv.num_registered) for r in reqs[:4]]))
        kv.check([*reqs[:4], hog])
    assert states[0] == states[1]
    assert states[0][5] > 0, "the pops evicted hashed blocks"
    if ahead is not None:
        assert all(n == len(b) - 1 for b, n in states[0][6][:3]), "each crossing decoder's full block registered"


def test_a_pool_whose_pops_are_logged_sees_every_pop() -> None:
    """A pool whose operations a caller wraps (``BlockPool.observed``: the sweep's derivation
    logs them) is popped through them, never around them: a block boundary, an admission."""
    kv, reqs = allocator_with_decoders(PagedAllocator, True)
    pool, logged = kv.pool, []
    get, one = pool.get_new_blocks, pool.pop_one
    pool.get_new_blocks = lambda n: logged.append(n) or get(n)  # type: ignore[method-assign]
    pool.pop_one = lambda: logged.append(1) or one()  # type: ignore[method-assign]
    pool.observed = True
    kv.cross_boundary(reqs[:3], None)
    kv.cross_boundary(reqs[3:4], None)
    assert kv.allocate(req(40, 9), 9)  # an admission's pops too (table_loops.grow)
    assert logged == [3, 1, 3]


def test_an_admission_in_one_call_leaves_what_the_methods_leave() -> None:
    """``allocate`` of a request without content: the one call (``grow``: the test, the pops,
    the marks) against ``can_allocate``, ``get_new_blocks`` and ``register_full_blocks``, where
    the pops evict blocks with content keys, published unique keys and marks; a refusal for want
    of blocks and one for the reserve; a re-admission with hits; a prompt in chunks (a chunk
    that fills no new block, one that takes none)."""
    states = []
    for cls in (PagedAllocator, OneByOne):
        kv, reqs, hog = hogged(cls, True)
        for r in (reqs[5], reqs[2], hog):  # content keys; then two preemptions (published keys)
            kv.free(r)
        back = reqs[2]
        hits = kv.get_computed_blocks(back)
        back.num_computed_tokens = 0
        before = kv.evictions
        assert kv.allocate(back, back.num_tokens - 4 * len(hits), hits)
        free = kv.num_free_blocks
        big, tight = req(40, 4 * free + 1), req(41, 4 * (free - 2))
        got = (kv.allocate(big, big.num_tokens), kv.allocate(tight, tight.num_tokens, reserve=3))
        late = req(20, 30)
        for n in (10, 1, 0, 19):  # 2 blocks marked; 1 block, none marked; nothing; 5 blocks, 5 marked
            assert kv.allocate(late, n)
            late.num_computed_tokens += n
        m = kv.headroom
        assert m is not None
        states.append((len(hits), got, big.kv, tight.kv, *pool_state(kv), kv.evictions - before,
                       [(list(r.kv.blocks), r.kv.num_registered) for r in (back, late)], (m.fail_max, m.pass_min)))
        kv.check([*reqs[:2], *reqs[3:5], back, late])
    assert states[0] == states[1]
    assert states[0][:4] == (2, (False, False), None, None), "a re-admission with hits; two refusals, nothing taken"
    assert states[0][9] > 0, "the pops evicted hashed blocks"
    assert states[0][10][1][1] == 7, "the late prompt's 7 full blocks are marked"
    assert states[0][-1][0] == -1, "the reserve's refusal noted"


def test_a_map_that_logs_what_enters_and_leaves_sees_every_publish_and_probe() -> None:
    """A preempted request's publish and its probe on a map that logs (KV events): the loops go
    through the map's own protocol."""
    from sim.cluster.events import _EventedCache

    kv, reqs = allocator_with_decoders(PagedAllocator, True)
    events: list[Any] = []
    kv.pool.cache = _EventedCache({}, events.append, lambda: 0.0)
    kv.free(reqs[2])  # not finished: a preemption, its marked blocks published
    hits = kv.get_computed_blocks(reqs[2])
    assert len(events) == 2 and len(hits) == 2, "two blocks published (stored, logged) and hit"
    assert dict(kv.pool.cache) == {-(2 * UNIQUE_BASE + 1 + j): b for j, b in enumerate(hits)}


def test_the_loops_refuse_what_they_cannot_read() -> None:
    kv, reqs = allocator_with_decoders(PagedAllocator, True)
    with pytest.raises(ValueError, match="one block for each request"):
        table_loops.append_each(reqs[:2], [1])
    reqs[0].kv.blocks[reqs[0].kv.num_registered] = 999  # a block id past the pool
    reqs[0].num_computed_tokens = 4 * (reqs[0].kv.num_registered + 1)
    with pytest.raises(IndexError):
        kv.register_decoded_blocks(reqs[:1], 0)
    with pytest.raises(ValueError, match="block_size must be positive"):
        table_loops.register_decoded(reqs, 0, 0, kv.pool.block_hash, UNPUBLISHED, kv.register_full_blocks)


def test_an_allocator_copies_and_pickles() -> None:
    kv, _ = allocator_with_decoders(PagedAllocator, True)
    for other in (copy.deepcopy(kv), pickle.loads(pickle.dumps(kv))):
        call = other.cross_call()
        assert call is not None and call[0] is table_loops.cross_pool
        assert call[1] is other.pool and call[4] == other.register_full_blocks, "its own pool, its own method"
        assert other.pool.free_queue.to_list() == kv.pool.free_queue.to_list()


def test_cross_pool_steps_aside_for_a_pool_whose_methods_must_run() -> None:
    """An observed pool (or one with duplicate keys) gets no pops from the compiled call: it
    returns False and changes nothing, and the caller goes through the allocator's methods."""
    kv, reqs = allocator_with_decoders(PagedAllocator, True)
    pool = kv.pool

    def state() -> tuple[object, ...]:
        return pool.free_queue.to_list(), pool.free_queue.size, [list(r.kv.blocks) for r in reqs], pool.evictions

    before = state()
    pool.observed = True
    assert not table_loops.cross_pool(reqs[:1], pool, None, kv.block_size, UNPUBLISHED, kv.register_full_blocks)
    assert state() == before
    pool.observed = False
    assert table_loops.cross_pool(reqs[:1], pool, None, kv.block_size, UNPUBLISHED, kv.register_full_blocks)
    assert pool.free_queue.size == before[1] - 1 and len(reqs[0].kv.blocks) == len(before[2][0]) + 1
    assert reqs[0].kv.blocks[-1] == before[0][0], "the free queue's first block"
    pool.check()
