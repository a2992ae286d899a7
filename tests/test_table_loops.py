"""The paged allocator's compiled per-request loops (``sim/kv/_table_loops.c``) are its Python
loops, faster: a new block for each decoder crossing a boundary, the marks (or keys) of the
blocks decoders fill, and the marks of a new prompt's blocks.

Whole simulations with both must give the same requests, steps and freed block tables; the
same calls on one allocator must leave the same block hashes, prefix map and tables. Skipped,
with the reason, where the extension was not built.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from sim.kv import paged_prefix
from sim.kv.block_pool import UNPUBLISHED
from sim.kv.paged import PagedAllocator
from tests.helpers import BUNDLED, mooncake_slice, req, same_either_way, table_loops
from workloads import load_trace


@pytest.mark.parametrize(("trace", "cfg"), [
    (lambda: load_trace(BUNDLED), {"max_model_len": 4096, "num_gpu_blocks": 300}),  # marks, preemptions
    (lambda: load_trace(BUNDLED), {"max_model_len": 4096, "num_gpu_blocks": 300, "async_scheduling": False}),
    (lambda: load_trace(BUNDLED), {"max_model_len": 4096, "num_gpu_blocks": 300, "free_order": "tail"}),
    (mooncake_slice, {"max_model_len": 8192, "num_gpu_blocks": 3000}),  # content: the Python path, called back
    (lambda: load_trace(BUNDLED), {"max_model_len": 4096, "num_gpu_blocks": 300, "enable_prefix_caching": False}),
], ids=["conv-async", "conv-sync", "conv-keys-not-marks", "mooncake-prefix", "no-caching"])
def test_a_simulation_is_the_same_with_compiled_and_python_table_loops(
        monkeypatch: pytest.MonkeyPatch, trace: Any, cfg: dict[str, Any]) -> None:
    compiled, _ = same_either_way(monkeypatch, (paged_prefix, "TABLE_LOOPS"), table_loops, trace(), **cfg)
    assert compiled.summary.fast_forward_steps > 0, "no window ran: the loops were not reached"


def pool_state(kv: PagedAllocator) -> tuple[Any, ...]:
    """What a compiled and a Python path must leave alike in the pool: hashes, the prefix map,
    ref counts, the free queue (order and size)."""
    pool = kv.pool
    return list(pool.block_hash), dict(pool.cache), list(pool.ref), pool.free_queue.to_list(), pool.free_queue.size


def allocator_with_decoders(which: str, lazy: bool) -> tuple[PagedAllocator, list[Any]]:
    """Five requests without content (three at a block's last token) and one with content,
    each holding its prompt's blocks, the blocks before its last registered."""
    kv = PagedAllocator(64, 4, free_order="front-tail" if lazy else "tail")
    reqs = [req(i, p) for i, p in enumerate((7, 8, 11, 3, 12))] + [req(9, 7, ids=tuple(range(7)))]
    for r in reqs:
        assert kv.allocate(r, r.num_tokens)
        r.num_computed_tokens = r.num_tokens
    kv.append_block(reqs[:4])  # one block each, popped together
    return kv, reqs


@pytest.mark.parametrize("lazy", [True, False], ids=["marks", "keys"])
@pytest.mark.parametrize("ahead", [0, 1])
def test_register_decoded_blocks_leaves_the_same_pool_with_either_loop(
        monkeypatch: pytest.MonkeyPatch, lazy: bool, ahead: int) -> None:
    states = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops(which))
        kv, reqs = allocator_with_decoders(which, lazy)
        assert (kv._register_decoded is not None) == (which == "compiled")
        kv.register_decoded_blocks(reqs, ahead)
        pool = kv.pool
        states.append((list(pool.block_hash), dict(pool.cache), {k: list(v) for k, v in pool.dups.items()},
                       [(list(r.kv.blocks), r.kv.num_registered) for r in reqs]))
        kv.check(reqs)
    assert states[0] == states[1]
    marked = states[0][0].count(UNPUBLISHED)
    assert (marked > 0) == lazy, "the workload reaches the marking branch (lazy) and only then"


def hogged(monkeypatch: pytest.MonkeyPatch, which: str, lazy: bool, loop: str) -> tuple[PagedAllocator, list[Any], Any]:
    """:func:`allocator_with_decoders` on ``which`` table loops (its compiled ``loop`` bound
    exactly when compiled), and a request holding every free block: only blocks freed after it
    are left to pop."""
    monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops(which))
    kv, reqs = allocator_with_decoders(which, lazy)
    assert (getattr(kv, loop) is not None) == (which == "compiled")
    hog = req(30, 4 * kv.num_free_blocks)
    assert kv.allocate(hog, hog.num_tokens)
    return kv, reqs, hog


@pytest.mark.parametrize("lazy", [True, False], ids=["marks", "keys"])
@pytest.mark.parametrize("ahead", [None, 0])
def test_a_block_boundary_in_one_compiled_call_leaves_what_append_and_register_leave(
        monkeypatch: pytest.MonkeyPatch, lazy: bool, ahead: int | None) -> None:
    """``cross_boundary``: the compiled call (pops, appends, marks or keys) against the Python
    path (``append_block`` then ``register_decoded_blocks``), on a pool whose free blocks still
    carry hashes, so that the pops evict."""
    states = []
    for which in ("compiled", "python"):
        kv, reqs, hog = hogged(monkeypatch, which, lazy, "_cross")  # only blocks freed below are left
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


def test_a_pool_whose_pops_are_logged_sees_every_pop_of_a_block_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool whose operations a caller wraps (``BlockPool.observed``: the sweep's derivation
    logs them) is popped through them, never around them by the compiled call."""
    monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops("compiled"))
    kv, reqs = allocator_with_decoders("compiled", True)
    pool, logged = kv.pool, []
    get, one = pool.get_new_blocks, pool.pop_one
    pool.get_new_blocks = lambda n: logged.append(n) or get(n)  # type: ignore[method-assign]
    pool.pop_one = lambda: logged.append(1) or one()  # type: ignore[method-assign]
    pool.observed = True
    kv.cross_boundary(reqs[:3], None)
    kv.cross_boundary(reqs[3:4], None)
    assert kv.allocate(req(40, 9), 9)  # an admission's pops too (_table_loops.take)
    assert logged == [3, 1, 3]


def test_a_new_prompt_marks_the_same_blocks_with_either_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admissions mark their prompt's full blocks unpublished (a hit's blocks keep their keys)."""
    states = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops(which))
        kv, reqs = allocator_with_decoders(which, True)
        kv.free(reqs[1])  # finished: its blocks go to the free queue, marked, so a pop evicts them
        late = req(20, 30)
        assert kv.allocate(late, 30)
        states.append((list(kv.pool.block_hash), late.kv.num_registered, list(late.kv.blocks)))
        kv.check([r for r in reqs if r is not reqs[1]] + [late])
    assert states[0] == states[1]
    assert states[0][1] == 7 and states[0][0].count(UNPUBLISHED) >= 7


def test_an_admission_in_one_compiled_call_leaves_what_pops_and_marks_leave(monkeypatch: pytest.MonkeyPatch) -> None:
    """``allocate`` of a request without content: the compiled call (pops, extend, marks) against
    the Python path (``get_new_blocks`` then ``register_full_blocks``), where the pops evict
    blocks with content keys, published unique keys and marks; a re-admission with hits, and a
    prompt in chunks (a chunk that fills no new block, one that takes none)."""
    states = []
    for which in ("compiled", "python"):
        kv, reqs, hog = hogged(monkeypatch, which, True, "_take")
        for r in (reqs[5], reqs[2], hog):  # content keys; then two preemptions (published keys)
            kv.free(r)
        back = reqs[2]
        hits = kv.get_computed_blocks(back)
        back.num_computed_tokens = 0
        before = kv.evictions
        assert kv.allocate(back, back.num_tokens - 4 * len(hits), hits)
        late = req(20, 30)
        for n in (10, 1, 0, 19):  # 2 blocks marked; 1 block, none marked; nothing; 5 blocks, 5 marked
            assert kv.allocate(late, n)
            late.num_computed_tokens += n
        states.append((len(hits), *pool_state(kv), kv.evictions - before,
                       [(list(r.kv.blocks), r.kv.num_registered) for r in (back, late)]))
        kv.check([*reqs[:2], *reqs[3:5], back, late])
    assert states[0] == states[1]
    assert states[0][0] == 2 and states[0][6] > 0, "a re-admission with hits; the pops evicted hashed blocks"
    assert states[0][7][1][1] == 7, "the late prompt's 7 full blocks are marked"


def test_a_new_table_in_one_compiled_call_is_what_allocate_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """``allocate`` of a request with no table yet (``_table_loops.fresh``) against the Python
    path: a refusal for want of one block and one for the reserve (noted in the margin, nothing
    else changed), then a first chunk that fills one block."""
    states = []
    for which in ("compiled", "python"):
        kv, reqs, hog = hogged(monkeypatch, which, True, "_take")
        assert (kv.fresh_args is not None) == (which == "compiled")
        for r in (reqs[5], reqs[2], hog):
            kv.free(r)
        free, before = kv.num_free_blocks, kv.evictions
        big, tight = req(40, 4 * free + 1), req(41, 4 * (free - 2))
        got = (kv.allocate(big, big.num_tokens), kv.allocate(tight, tight.num_tokens, reserve=3),
               kv.allocate(tight, 5, reserve=2))
        m = kv.headroom
        assert m is not None
        states.append((got, big.kv, list(tight.kv.blocks), tight.kv.num_registered, *pool_state(kv),
                       kv.evictions - before, (m.fail_max, m.pass_min)))
        kv.check([*reqs[:2], *reqs[3:5], tight])
    assert states[0] == states[1]
    assert states[0][:2] == ((False, False, True), None) and states[0][3] == 1
    assert states[0][-1][0] == -1, "the reserve's refusal noted"


def test_a_new_table_the_compiled_call_does_not_take_is_left_to_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fresh`` hands back (None, nothing changed) a request with content or a table, a pool
    with a second block under a key, one whose operations are logged, and a replaced map; and
    ``allocate`` does not call it once ``lazy_unique`` is off (KV events: every key in the map)."""
    monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops("compiled"))
    kv = PagedAllocator(32, 4)
    args = kv.fresh_args
    assert args is not None
    before = pool_state(kv)
    has_table = req(1, 9)
    assert args[0](req(0, 9, ids=tuple(range(9))), 9, 0, args) is None
    kv.allocate(has_table, 1)
    state = pool_state(kv)
    assert args[0](has_table, 8, 0, args) is None and pool_state(kv) == state
    for attr, value in (("dups", {7: [3]}), ("observed", True), ("cache", {})):
        old = getattr(kv.pool, attr)
        setattr(kv.pool, attr, value)
        assert args[0](req(2, 9), 9, 0, args) is None, attr
        setattr(kv.pool, attr, old)
    assert pool_state(kv) == state != before
    kv.lazy_unique = False  # as sim/cluster/events.py sets it
    r = req(3, 9)
    assert kv.allocate(r, 9) and len(kv.pool.cache) == 2, "the Python path: both full blocks keyed in the map"


def test_a_map_that_logs_what_enters_and_leaves_sees_the_same_with_either_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A preempted request's publish and its probe on a map that logs (KV events): the
    compiled loops go through the map's own protocol, so the log is Python's."""
    from sim.cluster.events import _EventedCache

    seen = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops(which))
        kv, reqs = allocator_with_decoders(which, True)
        events: list[Any] = []
        kv.pool.cache = _EventedCache({}, events.append, lambda: 0.0)
        kv.free(reqs[2])  # not finished: a preemption, its marked blocks published
        hits = kv.get_computed_blocks(reqs[2])
        seen.append((events, hits, dict(kv.pool.cache)))
    assert seen[0] == seen[1]
    assert len(seen[0][0]) == 2 and len(seen[0][1]) == 2, "two blocks published (stored, logged) and hit"


def test_the_compiled_loops_refuse_what_python_would_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops("compiled"))
    kv, reqs = allocator_with_decoders("compiled", True)
    loops = table_loops("compiled")
    with pytest.raises(ValueError, match="one block for each request"):
        loops.append_each(reqs[:2], [1])  # type: ignore[union-attr]
    reqs[0].kv.blocks[reqs[0].kv.num_registered] = 999  # a block id past the pool
    reqs[0].num_computed_tokens = 4 * (reqs[0].kv.num_registered + 1)
    with pytest.raises(IndexError, match="block id 999 out of range"):
        kv.register_decoded_blocks(reqs[:1], 0)
    with pytest.raises(IndexError, match="block id 999 out of range"):
        loops.mark_blocks(kv.pool.block_hash, [999], 0, 1, UNPUBLISHED)  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        loops.register_decoded(reqs, 0, 4, (), UNPUBLISHED, kv._register_decoded_one)  # type: ignore[union-attr]
    fq, pool = kv.pool.free_queue, kv.pool
    free = fq.to_list()
    with pytest.raises(ValueError, match="must not be negative"):
        loops.take([], fq._next, fq._prev, fq._head, pool.ref, pool.block_hash, pool.cache,  # type: ignore[union-attr]
                   UNPUBLISHED, 1, -1, 1)
    assert fq.to_list() == free, "refused before any pop"


def test_an_allocator_with_compiled_loops_copies_and_pickles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paged_prefix, "TABLE_LOOPS", table_loops("compiled"))
    kv, _ = allocator_with_decoders("compiled", True)
    for other in (copy.deepcopy(kv), pickle.loads(pickle.dumps(kv))):
        assert None not in (other._append_each, other._register_decoded, other._mark_blocks, other._cross, other._take)
        fresh = other.fresh_args
        assert fresh is not None and fresh[0] is kv.fresh_args[0]  # type: ignore[index]
        assert fresh[6] is other.pool.free_queue._next and fresh[11] is other.pool.cache, "its own pool's lists"
        assert other.pool.free_queue.to_list() == kv.pool.free_queue.to_list()
