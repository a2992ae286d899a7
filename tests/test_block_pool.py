"""The block pool against a plain model of vLLM 0.33's free order and prefix-cache map.

The pool's hot paths are written for speed (one fused loop per pop or release, a branch for a
cache without duplicate keys). The model below is written for reading: the free queue is a
Python list with its head at index 0, and each operation is the module docstring of
``sim/kv/block_pool.py`` said plainly. After every operation of a seeded random sequence, the
two must agree on everything a decision can read: free order, ref counts, hashes, the cache
map with its duplicates, evictions and the shared excess.

The pool runs compiled by Cython from its own source where it was built (``setup.py``), and as
that Python under ``KVSIM_PURE_PYTHON=1`` (CI runs this file both ways).
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field

import numpy as np
import pytest

from sim.kv.block_pool import FREE_ORDERS, UNPUBLISHED, BlockPool


@dataclass
class Model:
    free: list[int]
    order: str
    ref: dict[int, int] = field(default_factory=dict)
    bh: dict[int, int | None] = field(default_factory=dict)
    cache: dict[int, int] = field(default_factory=dict)
    dups: dict[int, list[int]] = field(default_factory=dict)
    evictions: int = 0
    shared_excess: int = 0

    def evict(self, b: int) -> None:
        key = self.bh[b]
        assert key is not None
        if self.cache[key] == b:  # the next block registered under the key takes its place
            if self.dups.get(key):
                self.cache[key] = self.dups[key].pop(0)
            else:
                del self.cache[key]
        else:
            self.dups[key].remove(b)
        self.dups = {k: v for k, v in self.dups.items() if v}
        self.bh[b] = None
        self.evictions += 1

    def pop(self, n: int) -> list[int]:
        if self.order == "stack":  # last freed, first reused; paper-v0 evicts nothing
            out = self.free[::-1][:n]
            self.free = self.free[:len(self.free) - n]
        else:
            out, self.free = self.free[:n], self.free[n:]
            for b in out:
                if self.bh.get(b) is not None:
                    self.evict(b)
        for b in out:
            self.ref[b] = 1
        return out

    def release(self, table: list[int]) -> None:
        front, tail = [], []
        for b in (table if self.order == "stack" else table[::-1]):
            self.ref[b] -= 1
            if self.ref[b] > 0:
                self.shared_excess -= 1
            elif self.order == "front-tail" and self.bh.get(b) is None:
                front.append(b)
            else:
                tail.append(b)
        self.free = front + self.free + tail

    def touch(self, table: list[int]) -> None:
        for b in table:
            if self.ref.get(b, 0) == 0:
                self.free.remove(b)
            else:
                self.shared_excess += 1
            self.ref[b] = self.ref.get(b, 0) + 1

    def cache_block(self, b: int, key: int) -> None:
        self.bh[b] = key
        if key in self.cache:
            self.dups.setdefault(key, []).append(b)
        else:
            self.cache[key] = b


def agree(pool: BlockPool, m: Model) -> None:
    assert pool.free_queue.to_list() == m.free
    assert pool.free_queue.size == len(m.free)
    assert all(pool.ref[b] == r for b, r in m.ref.items())
    assert all(pool.block_hash[b] == h for b, h in m.bh.items())
    assert pool.cache == m.cache and pool.dups == m.dups
    assert (pool.evictions, pool.shared_excess) == (m.evictions, m.shared_excess)
    pool.check()


@pytest.mark.parametrize("order", FREE_ORDERS)
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("many_keys", [False, True])
def test_pops_releases_and_hits_keep_vllms_free_order_and_cache_map(order: str, seed: int,
                                                                    many_keys: bool) -> None:
    """Few keys make duplicates under one key common; many keys make them rare (the pops'
    branch for a map without duplicates)."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n_blocks = int(rng.integers(3, 40))
        null = bool(rng.random() < 0.5)
        pool = BlockPool(n_blocks, null_block=null, free_order=order)
        m = Model(list(range(1 if null else 0, n_blocks)), order)
        keys = int(rng.integers(2, 12)) if not many_keys else 1 << 40
        tables: list[list[int]] = []
        for _ in range(60):
            op = rng.random()
            size = pool.free_queue.size
            if op < 0.45 and size:
                n = int(rng.integers(1, size + 1))
                got = [pool.pop_one()] if n == 1 and rng.random() < 0.5 else pool.get_new_blocks(n)
                assert got == m.pop(n)
                for b in got:  # some blocks fill and are published, as prompt blocks are (a block
                    # keeps its hash: paper-v0's stack order pops without evicting)
                    if rng.random() < 0.7 and pool.block_hash[b] is None:
                        key = int(rng.integers(1, keys + 1))
                        pool.cache_block(b, key)
                        m.cache_block(b, key)
                tables.append(got)
            elif op < 0.6 and tables:  # a prefix hit: another table takes the same blocks
                t = tables[int(rng.integers(len(tables)))]
                pool.touch(t)
                m.touch(t)
                tables.append(list(t))
            elif tables:
                t = tables.pop(int(rng.integers(len(tables))))
                pool.release(t)
                m.release(t)
            agree(pool, m)
        for t in tables:
            pool.release(t)
            m.release(t)
        agree(pool, m)
        assert pool.free_queue.size == pool.usable_blocks  # every block is back


def register(pool: BlockPool, regs: list[tuple[int, int | None]]) -> None:
    """Registrations as the paged allocator makes them: under a key, or marked (no key)."""
    for b, key in regs:
        if key is None:
            pool.block_hash[b] = UNPUBLISHED
        else:
            pool.cache_block(b, key)


@pytest.mark.parametrize("seed", range(6))
def test_a_runs_pops_commute_with_its_registrations(seed: int) -> None:
    """Fast-forward pops a run piece's blocks in one call ahead of the piece's registrations
    (sim/engine/fastforward/runs.py, ``DecodeBlocks.append_blocks``). Evicting a free block and
    registering an owned one leave the same pool in either order, even under one key (few keys:
    collisions and duplicates are common), and with unpublished marks among them."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n_blocks = int(rng.integers(8, 60))
        pool = BlockPool(n_blocks)
        keys = int(rng.integers(2, 8))
        tables: list[list[int]] = []
        for _ in range(30):  # a history: blocks taken, some published or marked, some given back
            size = pool.free_queue.size
            if rng.random() < 0.6 and size > 2:
                got = pool.get_new_blocks(int(rng.integers(1, size // 2 + 1)))
                for b in got:
                    if rng.random() < 0.3:
                        pool.block_hash[b] = UNPUBLISHED
                    elif rng.random() < 0.6:
                        pool.cache_block(b, int(rng.integers(1, keys + 1)))
                tables.append(got)
            elif tables:
                pool.release(tables.pop(int(rng.integers(len(tables)))))
        owned = [b for t in tables for b in t if pool.block_hash[b] is None]
        steps: list[tuple[int, list[tuple[int, int | None]]]] = []
        left = pool.free_queue.size
        for b in owned:  # one crossing per owned block: some pops, then its registration
            c = int(rng.integers(0, min(left, 3) + 1))
            left -= c
            steps.append((c, [(b, None if rng.random() < 0.3 else int(rng.integers(1, keys + 1)))]))
        if not steps:
            continue
        one_by_one, bulk = pool, copy.deepcopy(pool)
        popped: list[int] = []
        for c, regs in steps:
            popped += one_by_one.get_new_blocks(c)
            register(one_by_one, regs)
        assert bulk.get_new_blocks(sum(c for c, _ in steps)) == popped
        for _, regs in steps:
            register(bulk, regs)
        assert bulk.free_queue.to_list() == one_by_one.free_queue.to_list()
        assert (bulk.ref, bulk.block_hash) == (one_by_one.ref, one_by_one.block_hash)
        assert (bulk.cache, bulk.dups) == (one_by_one.cache, one_by_one.dups)
        assert bulk.evictions == one_by_one.evictions
        bulk.check()
        one_by_one.check()


def test_a_bad_block_id_raises_instead_of_reading_memory() -> None:
    pool = BlockPool(8)
    got = pool.get_new_blocks(3)
    with pytest.raises(IndexError):
        pool.release([99])
    with pytest.raises(TypeError):
        pool.release([object()])  # type: ignore[list-item]
    pool.release(got)
    pool.check()


def test_a_pool_copies_and_pickles() -> None:
    """Sweeps copy pools and Ray ships them."""
    pool = BlockPool(16)
    pool.cache_block(pool.get_new_blocks(5)[0], 7)
    front = pool.free_queue.to_list()[:4]
    for other in (copy.deepcopy(pool), pickle.loads(pickle.dumps(pool))):
        assert other.free_queue.to_list() == pool.free_queue.to_list() and other.cache == pool.cache
        assert other.get_new_blocks(4) == front
        other.check()


def test_a_map_that_logs_its_deletes_sees_every_eviction() -> None:
    """KV events (a stale precise router view) keep the pool's map as a dict subclass that logs
    stores and deletes; a pop deletes through its own ``del`` (a typed dict's C call would not)."""
    from sim.cluster.events import _EventedCache

    pool, events = BlockPool(8), []
    pool.cache = _EventedCache({}, events.append, lambda: 0.0)
    got = pool.get_new_blocks(3)
    for j, b in enumerate(got):
        pool.cache_block(b, 100 + j)
    pool.release(got)
    pool.get_new_blocks(7)  # every free block: the three hashed ones are evicted
    pool.check()
    assert [stored for _, _, stored in events].count(False) == 3
