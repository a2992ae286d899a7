"""Both allocators honour one contract (sim/kv/base.py): the same calls, the same meanings."""

from __future__ import annotations

import pytest

from sim.kv.base import KvAllocator
from sim.kv.paged import PagedAllocator
from sim.kv.slab import SlabAllocator
from sim.request import Request


def make(kind: str) -> KvAllocator:
    if kind == "paged":
        return PagedAllocator(17, 4)                      # 16 usable blocks of 4 slots
    return SlabAllocator(64, max_model_len=64, reservation="oracle", placement="buddy")


def req(uid: int, prompt: int, out: int = 4) -> Request:
    return Request(uid=uid, request_id=str(uid), arrival_s=0.0, prompt_tokens=prompt, output_tokens=out)


@pytest.mark.parametrize("kind", ["paged", "slab"])
def test_allocate_then_free_gives_every_block_back(kind: str) -> None:
    kv = make(kind)
    free0 = kv.num_free_blocks
    r = req(0, 10)
    need = kv.can_allocate(r, 10)
    assert need > 0 and kv.blocks_needed(r, 10) == need
    assert kv.allocate(r, 10)
    assert kv.num_free_blocks == free0 - need == free0 - kv.num_held_blocks(r)
    r.num_computed_tokens = 10
    kv.check([r])
    kv.free(r)
    assert kv.num_free_blocks == free0 and kv.num_held_blocks(r) == 0
    kv.check([])


@pytest.mark.parametrize("kind", ["paged", "slab"])
def test_a_failed_allocation_changes_nothing(kind: str) -> None:
    kv = make(kind)
    big = req(0, 30, out=2)
    assert kv.allocate(big, 30)
    big.num_computed_tokens = 30
    free0 = kv.num_free_blocks
    other = req(1, 40, out=2)
    assert kv.can_allocate(other, 40) == -1
    assert not kv.allocate(other, 40)
    assert kv.num_free_blocks == free0 and kv.num_held_blocks(other) == 0
    kv.check([big])


@pytest.mark.parametrize("kind", ["paged", "slab"])
def test_breakdown_sums_to_the_pool(kind: str) -> None:
    kv = make(kind)
    live = [req(i, 5 + 3 * i) for i in range(3)]
    for r in live:
        assert kv.allocate(r, r.prompt_tokens)
        r.num_computed_tokens = r.prompt_tokens
    mem = kv.breakdown(live, sum(r.num_computed_tokens for r in live))
    assert sum(mem) == kv.num_blocks * kv.block_size
    assert mem.token_state == sum(r.prompt_tokens for r in live)
    assert min(mem) >= 0


@pytest.mark.parametrize("kind", ["paged", "slab"])
def test_reserve_is_headroom_for_paged_pools_only(kind: str) -> None:
    kv = make(kind)
    r = req(0, 8)
    free = kv.num_free_blocks
    need = kv.can_allocate(r, 8)
    held_back = kv.can_allocate(r, 8, reserve=free - need + 1)
    assert held_back == (-1 if kind == "paged" else need)  # a slab reserves whole chunks


def test_never_fits_names_the_limit() -> None:
    assert "KV pool of 16" in make("paged").never_fits(req(0, 100))
    split = SlabAllocator(48, max_model_len=64, reservation="oracle")  # buddy trees of 32 + 16
    assert "largest contiguous region" in split.never_fits(req(0, 40, out=1))
    assert make("paged").never_fits(req(0, 8)) == ""


def test_requests_carry_one_allocator_handle_and_nothing_else() -> None:
    from dataclasses import fields

    names = {f.name for f in fields(Request)}
    assert "kv" in names
    assert not names & {"blocks", "hashes", "num_registered", "chunk_start", "chunk_size", "requested_slots"}
