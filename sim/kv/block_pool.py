"""vLLM 0.33's BlockPool: block identities, ref counts, the free queue and the prefix-cache map.

Shared by every KV-cache group of a paged allocator. It knows blocks, not requests.

Free order (vLLM 0.33): a table is released tail-first; blocks without a hash go to the
*front* of the free queue (reused first), hashed blocks to the *tail* (evicted last, LRU)::

    release [1 2 3] with 1, 2 hashed, 3 partial (unhashed):
    before   head <-> 4 <-> ... <-> 10 <-> tail
    after    head <-> 3 <-> 4 <-> ... <-> 10 <-> 2 <-> 1 <-> tail

``tail`` (vllm-v1-legacy) appends everything to the tail; ``stack`` (paper-v0) pops and
pushes at the tail, so the last block freed is the first reused.

Unpublished blocks: a block of a request without prompt content has a key only that request
can look up (``unique_key(uid, j)``), and only after a preemption. The paged allocator may mark
such a block ``UNPUBLISHED`` in ``block_hash`` instead of entering it in the map, and enter it
(:meth:`BlockPool.cache_block`) when its request is freed before it finishes. It counts as
hashed everywhere (free order, evictions); a request that finishes never pays for the map.

Compiled: this module and :mod:`sim.kv.free_queue` are compiled by Cython from this source
where a C compiler is (``setup.py``; ``block_pool.pxd`` types the pool's lists and the loops'
locals), and run as they are where not. Where a loop writes ``i = b``, ``i`` is the block id as a
C index (converted once) and ``b`` the id object the lists keep: in Python the two are one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sim.kv.free_queue import FreeQueue

FREE_ORDERS = ("front-tail", "tail", "stack")
UNPUBLISHED = -(1 << 62)  # block_hash of a hashed block not in the map (no key reaches it; module docstring)


def pop_front(out: list[int], nxt: Any, prv: Any, head: int, ids: list[int], ref: list[int],
              bh: list[int | None], cache: dict[int, int], n: int, unpub: int) -> int:
    """Unlink the first ``n`` blocks after ``head`` from a free queue's links (``nxt``, ``prv``)
    onto ``out`` (their int objects, ``ids[b]``), ref count 1 each, a hash a block still carries
    evicted (``del cache[key]``, unless the mark ``unpub``); returns the evictions. The caller takes ``n`` off the queue's
    size and counts them. :meth:`BlockPool.get_new_blocks` without duplicate keys, on the
    pool's lists: one loop for it and for the allocator's crossings (:mod:`sim.kv.table_loops`),
    which pop straight into their own lists."""
    evicted = 0
    b = nxt[head]
    for _ in range(n):
        out.append(ids[b])
        key = bh[b]
        if key is not None:  # BlockPool._evict without duplicates, inlined
            if key is not unpub:
                del cache[key]
            bh[b] = None
            evicted += 1
        ref[b] = 1
        b = nxt[b]
    nxt[head] = b
    prv[b] = head
    return evicted


class PoolCounters:
    """The capacity counters of an allocator that hands out blocks of one :class:`BlockPool`
    (the paged allocator and the hybrid coordinator alike)."""

    pool: BlockPool
    usable_blocks: int

    @property
    def num_free_blocks(self) -> int:
        return self.pool.free_queue.size

    @property
    def usage(self) -> float:
        return 1.0 - self.pool.free_queue.size / self.usable_blocks

    @property
    def evictions(self) -> int:
        return self.pool.evictions

    @property
    def shared_excess(self) -> int:
        return self.pool.shared_excess


class BlockPool:
    def __init__(self, num_blocks: int, *, null_block: bool = True,
                 free_order: str = "front-tail") -> None:
        if free_order not in FREE_ORDERS:
            raise ValueError(free_order)
        self.num_blocks = num_blocks
        self.null_block = 0 if null_block else -1
        self.usable_blocks = num_blocks - (1 if null_block else 0)
        self.free_order = free_order
        self.stack = free_order == "stack"
        self.ref = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cache: dict[int, int] = {}            # hash key -> block
        self.dups: dict[int, list[int]] = {}       # extra blocks registered under the same key
        self.shared_excess = 0                     # sum over blocks of max(ref - 1, 0)
        self.evictions = 0
        self.observed = False  # its operations are wrapped to be logged (sim/sweep/derive.py): call them
        self.free_queue = FreeQueue(num_blocks, range(1 if null_block else 0, num_blocks))

    # ---- prefix-cache map ---------------------------------------------------------------------
    def cache_block(self, b: int, key: int) -> None:
        """Give block ``b`` the hash ``key``; a second block under a key waits in ``dups``."""
        self.block_hash[b] = key
        if key in self.cache:
            self.dups.setdefault(key, []).append(b)
        else:
            self.cache[key] = b

    def cache_unhashed(self, blocks: list[int], keys: list[int]) -> None:
        """:meth:`cache_block` for each block, in order, that has no hash yet (a prompt's
        registration: a block shared with a hit keeps its own); one key per block."""
        if len(keys) != len(blocks):
            raise ValueError(f"{len(blocks)} blocks, {len(keys)} keys")
        bh = self.block_hash
        for j in range(len(blocks)):
            b = blocks[j]
            i = b
            if bh[i] is None:
                self.cache_block(b, keys[j])

    def _evict(self, b: int, key: int) -> None:
        self.block_hash[b] = None
        self.evictions += 1
        if key is UNPUBLISHED:
            return
        if not self.dups:  # no key has a second block: a hashed block is its key's entry (check())
            del self.cache[key]
        elif self.cache.get(key) == b:
            extra = self.dups.get(key)
            if extra:  # the next block registered under this hash, as vLLM's per-hash dict
                self.cache[key] = extra.pop(0)
                if not extra:
                    del self.dups[key]
            else:
                del self.cache[key]
        else:
            self.dups[key].remove(b)
            if not self.dups[key]:
                del self.dups[key]

    # ---- taking and giving back ---------------------------------------------------------------
    def get_new_blocks(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the free queue's front (the end for ``stack``); ref count 1.

        A popped block that still carries a hash is evicted from the prefix cache (counted).
        Hot path: the queue walk, the eviction check and the ref count share one loop.
        """
        if self.stack:
            popped = self.free_queue.pop_n(n)
            for b in popped:
                self.ref[b] = 1
            return popped
        fq = self.free_queue
        nxt, head, ids = fq._next, fq._head, fq.ids
        ref, bh = self.ref, self.block_hash
        out: list[int] = []
        if not self.dups:
            self.evictions += pop_front(out, nxt, fq._prev, head, ids, ref, bh, self.cache, n, UNPUBLISHED)
            fq.size -= n
            return out
        add = out.append
        b = nxt[head]
        for _ in range(n):
            add(ids[b])
            key = bh[b]
            if key is not None:
                self._evict(ids[b], key)
            ref[b] = 1
            b = nxt[b]
        nxt[head] = b
        fq._prev[b] = head
        fq.size -= n
        return out

    def pop_one(self) -> int:
        """``get_new_blocks(1)[0]`` (the decode hot path: one decoder crossing a block boundary)."""
        if self.stack:
            return self.get_new_blocks(1)[0]
        fq = self.free_queue
        nxt, head = fq._next, fq._head
        b = nxt[head]
        key = self.block_hash[b]
        if key is not None:
            self._evict(fq.ids[b], key)
        self.ref[b] = 1
        after = nxt[b]
        nxt[head] = after
        fq._prev[after] = head
        fq.size -= 1
        return fq.ids[b]

    def touch(self, blocks: Iterable[int]) -> None:
        """Take one more reference on each block (a hit on a free block unlinks it)."""
        ref, fq = self.ref, self.free_queue
        for b in blocks:
            i = b  # (an index: compiled, the id converted once)
            if ref[i] == 0:
                fq.remove(b)
            else:
                self.shared_excess += 1
            ref[i] += 1

    def num_free_among(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` sit in the free queue (ref count 0)."""
        return list(map(self.ref.__getitem__, blocks)).count(0)

    def release(self, table: list[int]) -> None:
        """Drop one reference on each block of a table (tail first; see the module docstring)."""
        ref, bh, fq = self.ref, self.block_hash, self.free_queue
        split = self.free_order == "front-tail"
        front: list[int] = []
        to_front = front.append
        # blocks for the tail are linked there as they come (FreeQueue.append_n, inlined); the
        # front's go in after, in their order (the two ends are apart, so the order of the two
        # does not matter, even on an empty queue)
        nxt, prv, end = fq._next, fq._prev, fq._tail
        li, shared, n_tail = prv[end], 0, 0  # (the tail's last block)
        n, stack = len(table), self.stack
        for j in range(n):
            b = table[j if stack else n - 1 - j]
            i = b  # (an index: compiled, the id converted once; the table keeps the id object)
            r = ref[i]  # (a C integer compiled: the count taken out once, then decremented)
            r -= 1
            ref[i] = r
            if r > 0:
                shared += 1
            elif split and bh[i] is None:
                to_front(b)
            else:
                nxt[li] = i
                prv[i] = li
                li = i
                n_tail += 1
        nxt[li], prv[end] = end, li
        fq.size += n_tail
        self.shared_excess -= shared
        fq.prepend_n(front)

    # ---- invariants ---------------------------------------------------------------------------
    def check(self, references: list[int] | None = None) -> None:
        """Raise AssertionError if the pool is inconsistent; ``references[b]`` counts the tables
        that hold block ``b`` (then it must equal the ref count)."""
        N = self.num_blocks
        fq = self.free_queue
        in_q = fq.to_list()
        assert len(in_q) == fq.size == len(set(in_q)), "free queue size/duplicates"
        assert all(x >= 0 for x in self.ref), "negative ref count"
        if references is not None:
            assert references == self.ref, "ref counts != block-table references"
        used = sum(1 for x in self.ref if x > 0)
        null = N - self.usable_blocks
        assert used + fq.size + null == N, f"blocks not conserved: {used}+{fq.size}+{null} != {N}"
        for b in in_q:
            assert self.ref[b] == 0 and b != self.null_block, f"block {b} in free queue but in use"
        assert self.shared_excess == sum(max(x - 1, 0) for x in self.ref), "shared excess drift"
        for key, b in self.cache.items():
            assert self.block_hash[b] == key, "cache map points at a block with another hash"
        n_hashed = sum(1 for h in self.block_hash if h is not None and h is not UNPUBLISHED)
        assert n_hashed == len(self.cache) + sum(len(v) for v in self.dups.values()), "hash map size"
        for key, extra in self.dups.items():
            assert all(self.block_hash[b] == key for b in extra), "a duplicate with another hash"
