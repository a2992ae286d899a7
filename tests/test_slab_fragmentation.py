"""External fragmentation of a slab pool, as the vLLM paper means it: free memory that cannot be
used for the request that is waiting (sim/kv/slab.py's docstring draws the cases)."""

from __future__ import annotations

import pytest

from sim.config.schema import make_config
from sim.kv.slab import SlabAllocator
from sim.request import Request
from sim.run.simulate import simulate


def req(uid: int, slots: int) -> Request:
    """A request whose oracle chunk asks for exactly ``slots`` slots (prompt + output)."""
    return Request(uid=uid, request_id=str(uid), arrival_s=0.0, prompt_tokens=slots - 1, output_tokens=1)


def placed(placement: str, pool: int, sizes: list[int], drop: list[int]) -> tuple[SlabAllocator, list[Request]]:
    """Place chunks of ``sizes`` in order, then free the ones at indices ``drop``."""
    slab = SlabAllocator(pool, max_model_len=pool, reservation="oracle", placement=placement)
    reqs = [req(i, n) for i, n in enumerate(sizes)]
    for r in reqs:
        assert slab.allocate(r, r.prompt_tokens)
    for i in drop:
        slab.free(reqs[i])
    live = [r for i, r in enumerate(reqs) if i not in drop]
    slab.check(live)
    return slab, live


def ext_free(slab: SlabAllocator, live: list[Request], waiting: Request | None) -> tuple[int, int]:
    mem = slab.breakdown(live, 0, waiting=waiting)
    assert sum(mem) == slab.pool_slots
    return mem.external_frag, mem.free


def test_an_empty_pool_has_no_external_fragmentation() -> None:
    """15,728 slots (OPT-13B, 12 GiB) split into buddy trees 8192 + 4096 + ... + 16: nothing is
    a hole while nothing waits; a waiting 2,048-slot chunk cannot use the trees below 2,048."""
    slab = SlabAllocator(15_728, max_model_len=2048, reservation="pow2")
    assert ext_free(slab, [], None) == (0, 15_728)
    head = Request(uid=0, request_id="0", arrival_s=0.0, prompt_tokens=1500, output_tokens=300)  # 1500 + 512
    assert slab.chunk_slots(head) == 2048
    assert ext_free(slab, [], head) == (1024 + 256 + 64 + 32 + 16, 8192 + 4096 + 2048)


def test_first_fit_holes_are_the_gaps_too_small_for_the_head() -> None:
    """The docstring's picture: gaps of 2, 8 and 3 free slots between chunks of 3, 2 and 1."""
    slab, live = placed("first-fit", 19, [3, 2, 2, 8, 1, 3], drop=[1, 3, 5])
    assert slab.placement.total_free() == 13
    assert ext_free(slab, live, req(9, 4)) == (5, 8)
    assert ext_free(slab, live, req(9, 9)) == (13, 0)
    assert ext_free(slab, live, None) == (0, 13)


def test_buddy_holes_are_the_free_blocks_below_the_heads_rounded_chunk() -> None:
    """One 16-slot tree: chunks 4 @0, 4 @4, 2 @8; freeing the first leaves free blocks
    4 @0, 2 @10, 4 @12. A 3-slot head rounds to 4: only the 2-slot block is a hole; a 5-slot
    head rounds to 8, which no free block holds."""
    slab, live = placed("buddy", 16, [4, 4, 2], drop=[0])
    assert ext_free(slab, live, req(9, 3)) == (2, 8)
    assert ext_free(slab, live, req(9, 5)) == (10, 0)
    assert ext_free(slab, live, None) == (0, 10)


def test_rounding_of_live_chunks_stays_external_whether_or_not_anything_waits() -> None:
    slab, live = placed("buddy", 16, [3], drop=[])   # a 3-slot request in a 4-slot chunk
    assert ext_free(slab, live, None) == (1, 12)


@pytest.mark.parametrize("exact_steps", [False, True])
def test_steps_of_an_idle_or_queue_free_slab_show_no_holes(bundled_trace, exact_steps: bool) -> None:
    """The issue's run: with nothing running the whole pool is free; with nothing waiting the
    external share is only the rounding of live chunks (less than what the chunks asked for)."""
    cfg = make_config(allocator="slab", reservation="pow2", model="opt-13b", gpu="a100-40gb",
                      kv_memory="12GiB", max_model_len=2048, exact_steps=exact_steps)
    steps = simulate(cfg, bundled_trace).steps
    pool = int(steps[["token_state_slots", "reserved_slots", "internal_frag_slots",
                      "external_frag_slots", "free_slots"]].sum(axis=1).iloc[0])
    idle = steps[steps["num_running"] == 0]
    assert len(idle) > 0
    assert (idle["external_frag_slots"] == 0).all() and (idle["free_slots"] == pool).all()
    no_queue = steps[(steps["num_waiting"] == 0) & (steps["num_running"] > 0)]
    requested = pool - no_queue["free_slots"] - no_queue["external_frag_slots"]  # asked-for slots
    assert len(no_queue) > 0 and (no_queue["external_frag_slots"] < requested).all()
    queued = steps[steps["num_waiting"] > 0]
    assert (queued["external_frag_slots"] > 0).any()
