"""Hypothesis: random allocate / append / free / preempt / fork sequences through both
allocators; the invariants (blocks conserved, ref counts >= 0 and equal to table references,
hash map consistent, no leaks at the end) are checked after every operation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.base import cdiv
from sim.kv.paged import PagedAllocator
from sim.kv.slab import SlabAllocator
from sim.request import Request
from sim.sched.admission import Admission
from tests.helpers import req

OPS = st.lists(st.tuples(st.sampled_from(["new", "append", "free", "preempt", "fork", "cow"]),
                         st.integers(0, 10_000), st.integers(1, 60)), min_size=1, max_size=80)


def _req(uid: int, prompt: int, shared: bool) -> Request:
    """200 outputs; ``shared`` requests all start with the same token ids."""
    return req(uid, prompt, 200, base=0 if shared else None)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, B=st.sampled_from([1, 4, 16]), N=st.integers(2, 40),
       order=st.sampled_from(["front-tail", "tail", "stack"]), caching=st.booleans())
def test_paged_invariants_hold_after_every_operation(ops, B, N, order, caching) -> None:
    pool = PagedAllocator(N, B, null_block=order != "stack", free_order=order, enable_caching=caching)
    live: list[Request] = []
    uid = 0
    for op, pick, size in ops:
        if op == "new":
            r = _req(uid, size, shared=pick % 2 == 0)
            uid += 1
            hits = pool.get_computed_blocks(r)
            hit_tokens = len(hits) * B
            if Admission(reserve_full_isl=True).admit(pool, r, r.num_tokens - hit_tokens, hits, False):
                r.num_computed_tokens = r.num_tokens
                live.append(r)
            else:
                assert pool.num_held_blocks(r) == 0
        elif live and op == "append":
            r = live[pick % len(live)]
            r.num_output += 1
            r.num_tokens += 1
            if pool.allocate(r, 1):
                r.num_computed_tokens += 1
                assert pool.num_held_blocks(r) == cdiv(r.num_computed_tokens, B)
            else:
                r.num_output -= 1
                r.num_tokens -= 1
        elif live and op in ("free", "preempt"):
            r = live.pop(pick % len(live))
            pool.free(r)
            r.num_computed_tokens = 0
        elif live and op == "fork" and not caching:
            src = live[pick % len(live)]
            dst = _req(uid, src.prompt_tokens, shared=False)
            uid += 1
            dst.num_computed_tokens = src.num_computed_tokens
            pool.sharing.fork(src, dst)
            live.append(dst)
        elif live and op == "cow" and not caching:
            r = live[pick % len(live)]
            if pool.num_held_blocks(r):
                pool.sharing.copy_on_write(r)
        pool.check(live)
    for r in live:
        pool.free(r)
    pool.check([])
    assert pool.num_free_blocks == pool.usable_blocks  # nothing leaks


@settings(max_examples=150, deadline=None)
@given(ops=OPS, pool_slots=st.integers(64, 5000), placement=st.sampled_from(["buddy", "first-fit"]),
       reservation=st.sampled_from(["max", "pow2", "oracle"]))
def test_slab_invariants_hold_after_every_operation(ops, pool_slots, placement, reservation) -> None:
    slab = SlabAllocator(pool_slots, 64, reservation, placement)
    live: list[Request] = []
    for uid, (op, pick, size) in enumerate(ops):
        if op == "new":
            r = Request(uid=uid, request_id=str(uid), arrival_s=0.0, prompt_tokens=min(size, 40),
                        output_tokens=1 + pick % 24)
            if not slab.never_fits(r) and slab.allocate(r, r.prompt_tokens):
                r.num_computed_tokens = r.prompt_tokens
                live.append(r)
        elif live and op == "append":
            r = live[pick % len(live)]
            if r.num_computed_tokens < r.final_tokens:
                r.num_computed_tokens += 1
        elif live and op in ("free", "preempt"):
            slab.free(live.pop(pick % len(live)))
        slab.check(live)
        parts = slab.breakdown(live, sum(r.num_computed_tokens for r in live))
        assert sum(parts) == pool_slots and min(parts) >= 0
    for r in live:
        slab.free(r)
    slab.check([])
    assert slab.placement.total_free() == pool_slots
