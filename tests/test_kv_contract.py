"""Every allocator honours one contract (sim/kv/base.py): the same calls, the same meanings.

The same specification runs against the four configurations (``tests.helpers.KV_KINDS``): the
paged allocator, a slab, the hybrid coordinator (full + sliding-window groups) and the paged
allocator with the CPU offload tier as its KV connector; one random op-driver
(``tests.helpers.drive_kv``) checks the invariants after every operation on each.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from sim.kv.base import KvAllocator
from sim.kv.coordinator import HybridAllocator
from sim.kv.paged import PagedAllocator
from sim.kv.slab import SlabAllocator
from sim.kv.window import KvGroup
from sim.request import FIELDS
from tests.helpers import KV_KINDS, drive_kv, make_kv, req

GROUPS = {"hybrid": 2}  # KV-cache groups a computed token fills a slot in


def make(kind: str) -> KvAllocator:
    kv: KvAllocator = make_kv(kind)               # 16 usable blocks of 4 slots (a slab: 64 slots)
    return kv


@pytest.mark.parametrize("kind", KV_KINDS)
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


@pytest.mark.parametrize("kind", KV_KINDS)
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


@pytest.mark.parametrize("kind", KV_KINDS)
def test_breakdown_sums_to_the_pool(kind: str) -> None:
    kv = make(kind)
    live = [req(i, 5 + 3 * i) for i in range(3)]
    for r in live:
        assert kv.allocate(r, r.prompt_tokens)
        r.num_computed_tokens = r.prompt_tokens
    mem = kv.breakdown(live, sum(r.num_computed_tokens for r in live))
    assert sum(mem) == kv.num_blocks * kv.block_size
    assert mem.token_state == GROUPS.get(kind, 1) * sum(r.prompt_tokens for r in live)
    assert min(mem) >= 0


@pytest.mark.parametrize("kind", KV_KINDS)
def test_reserve_is_headroom_for_paged_pools_only(kind: str) -> None:
    kv = make(kind)
    r = req(0, 8)
    free = kv.num_free_blocks
    need = kv.can_allocate(r, 8)
    held_back = kv.can_allocate(r, 8, reserve=free - need + 1)
    assert held_back == (need if kind == "slab" else -1)  # a slab reserves whole chunks


def test_never_fits_names_the_limit() -> None:
    assert "KV pool of 16" in make("paged").never_fits(req(0, 100))
    split = SlabAllocator(48, max_model_len=64, reservation="oracle")  # buddy trees of 32 + 16
    assert "KV pool of 16" in make("hybrid").never_fits(req(0, 60))      # 15 blocks x 2 groups
    assert "largest contiguous region" in split.never_fits(req(0, 40, out=1))
    assert make("paged").never_fits(req(0, 8)) == ""


def test_requests_carry_one_allocator_handle_and_nothing_else() -> None:
    names = set(FIELDS)
    assert "kv" in names
    assert not names & {"blocks", "hashes", "num_registered", "chunk_start", "chunk_size", "requested_slots"}


# ---- capabilities: asked for, never inferred from the class --------------------------------------
@pytest.mark.parametrize("kind", KV_KINDS)
def test_capabilities_say_what_each_pool_offers(kind: str) -> None:
    kv = make(kind)
    assert (kv.sharing is not None) == kind.startswith("paged")          # fork + copy-on-write
    assert (kv.connector is not None) == (kind == "paged+offload")
    view = kv.layout
    assert (view is None) == (kind == "hybrid")                          # one picture per group
    if view is not None:
        assert view.kind == ("slab" if kind == "slab" else "paged")
        assert view.num_units * view.unit_tokens == kv.num_blocks * kv.block_size
    assert (kv.decode_blocks is not None) == kind.startswith("paged")    # bulk decode (fast-forward)
    r = req(0, 9, ids=tuple(range(9)))
    if kind == "slab":
        with pytest.raises(ValueError, match="slab"):
            kv.block_keys(r, 0, 2)
    else:                                                                 # content keys: equal prefixes
        assert kv.block_keys(r, 0, 2) == kv.block_keys(req(1, 12, ids=tuple(range(12))), 0, 2)


def test_no_caller_outside_sim_kv_tests_the_allocator_class() -> None:
    """Callers rely on the contract: no isinstance on a concrete allocator and no getattr probe
    of the pool outside sim/kv/."""
    sim = Path(__file__).resolve().parents[1] / "sim"
    bad = re.compile(r"isinstance\([^)]*(Allocator|Chunk|BlockTable)|getattr\(\s*(self\.)?kv\b")
    hits = [f"{p.relative_to(sim)}:{i}" for p in sim.rglob("*.py") if "kv" not in p.relative_to(sim).parts[:1]
            for i, line in enumerate(p.read_text().splitlines(), 1) if bad.search(line)]
    assert hits == []


# ---- one op-driver, every allocator -------------------------------------------------------------
@pytest.mark.parametrize("kind", KV_KINDS)
def test_random_operations_keep_the_invariants_and_leak_nothing(kind: str) -> None:
    outcomes = []
    for seed in range(6):                                    # pools of 11 to 39 usable blocks
        kv = make_kv(kind, num_blocks=12 + 5 * seed)
        outcomes += [row[2] for row in drive_kv(kv, np.random.default_rng(seed), 400)]
    assert any(o is False or (isinstance(o, tuple) and not o[0]) for o in outcomes)  # the pool ran full
    if kind != "slab":
        assert any(isinstance(o, tuple) and o[0] and o[1] > 0 for o in outcomes)     # prefix hits happened


def test_the_cpu_tier_serves_hits_the_gpu_evicted() -> None:
    kv = make_kv("paged+offload", num_blocks=14, cpu_blocks=40)
    drive_kv(kv, np.random.default_rng(3), 600)
    c = kv.connector
    assert c is not None
    st = c.stats()
    assert st.stored_blocks > 0 and st.loaded_blocks > 0 and kv.evictions > 0


@pytest.mark.parametrize("seed", range(4))
def test_a_coordinator_of_one_full_group_decides_as_the_paged_allocator(seed: int) -> None:
    """vLLM's single-group manager is a coordinator of one: the same operations give the same
    outcomes with the same block ids (sim/kv/manager.py)."""
    paged = PagedAllocator(20, 4)
    one = HybridAllocator(20, 4, (KvGroup(),))
    a = drive_kv(paged, np.random.default_rng(seed), 400, blocks_of=lambda r: paged.group_tables(r)[0].blocks)
    b = drive_kv(one, np.random.default_rng(seed), 400, blocks_of=lambda r: one.group_tables(r)[0].blocks)
    assert a == b and len(a) > 100
