"""Paged KV allocator: vLLM 0.33's BlockPool + KVCacheManager for one full-attention group.

Mechanism only: block identities, ref counts, the free queue and the prefix-cache hash map.
Which request to admit, preempt or resume is decided by the scheduler.

A request's block table maps logical blocks to scattered physical ones; only the last block
may be partial (``B`` = block_size = 4 here)::

    tokens   0 1 2 3 | 4 5 6 7 | 8 . . .          9-token prompt, B = 4
    logical  [  0    ][   1    ][   2    ]
    physical    7         3        12             last block 1/4 full: 3 slots unused
    token 37 -> logical block 37 // 4 = 9, slot 37 % 4 = 1

Free order (vLLM 0.33): freeing walks the table tail-first; blocks without a hash go to the
*front* of the free queue (reused first), hashed blocks to the *tail* (evicted last, LRU).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sim.kv.free_queue import FreeQueue
from sim.request import Request

UNIQUE_BASE = 1 << 24  # blocks per request addressable by the unique-content hash keys


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class PagedAllocator:
    """Block pool with a prefix cache. See module docstring for the layout."""

    kind = "paged"

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        null_block: bool = True,
        free_order: str = "front-tail",
        enable_caching: bool = True,
        watermark: float = 0.0,
    ) -> None:
        if free_order not in ("front-tail", "tail", "stack"):
            raise ValueError(free_order)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.null_block = 0 if null_block else -1
        self.free_order = free_order
        self.enable_caching = enable_caching
        self.watermark_blocks = int(watermark * num_blocks)
        self.ref = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cache: dict[int, int] = {}            # hash key -> block
        self._dups: dict[int, list[int]] = {}      # extra blocks registered under the same key
        self._intern: dict[tuple[object, ...], int] = {}
        self.shared_excess = 0                     # sum over blocks of max(ref - 1, 0)
        self.evictions = 0
        first = 1 if null_block else 0
        self.free_queue = FreeQueue(num_blocks, range(first, num_blocks))
        self._stack = free_order == "stack"

    # ---- capacity -------------------------------------------------------------------------
    @property
    def usable_blocks(self) -> int:
        return self.num_blocks - (1 if self.null_block == 0 else 0)

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.size

    @property
    def usage(self) -> float:
        return 1.0 - self.free_queue.size / self.usable_blocks

    # ---- hashing ----------------------------------------------------------------------------
    def block_key(self, req: Request, j: int) -> int:
        """Chained content key of logical block ``j`` (any collision-free chain hash will do)."""
        hashes = req.hashes
        while len(hashes) <= j:
            hashes.append(self._key(req, len(hashes)))
        return hashes[j]

    def _key(self, req: Request, j: int) -> int:
        B = self.block_size
        c = req.content
        if c is None or (j + 1) * B > req.prompt_tokens:
            return -(req.uid * UNIQUE_BASE + j + 1)  # content unique to this request
        kind = c[0]  # type: ignore[index]
        if kind == "ids":
            content: object = c[1][j * B:(j + 1) * B]  # type: ignore[index]
        elif kind == "hash":
            tph = c[2]  # type: ignore[index]
            h0, h1 = j * B // tph, ((j + 1) * B - 1) // tph
            content = (c[1][h0:h1 + 1], j * B - h0 * tph)  # type: ignore[index]
        else:  # ("shared", key): fanned-out samples share their prompt
            content = (c[1], j)  # type: ignore[index]
        parent = req.hashes[j - 1] if j else 0
        key = (parent, content)
        v = self._intern.get(key)
        if v is None:
            v = self._intern[key] = len(self._intern) + 1
        return v

    # ---- prefix cache -------------------------------------------------------------------------
    def get_computed_blocks(self, req: Request) -> list[int]:
        """Longest cached prefix, capped at ``num_tokens - 1`` and counted in whole blocks."""
        if not self.enable_caching:
            return []
        hits: list[int] = []
        cache = self.cache
        for j in range((req.num_tokens - 1) // self.block_size):
            b = cache.get(self.block_key(req, j))
            if b is None:
                break
            hits.append(b)
        return hits

    def _register(self, req: Request, upto_tokens: int) -> None:
        full = upto_tokens // self.block_size
        j0 = req.num_registered
        if full <= j0:
            return
        blocks, bh, cache = req.blocks, self.block_hash, self.cache
        # blocks past the shared prompt content are unique to the request: their key is
        # arithmetic (no hashing, never a duplicate)
        shared_upto = self.prompt_content_blocks(req)
        unique_base = -(req.uid * UNIQUE_BASE + 1)
        for j in range(j0, full):
            b = blocks[j]
            if bh[b] is None:
                if j >= shared_upto:
                    key = unique_base - j
                    bh[b] = key
                    if key in cache:  # the request's own block from before a preemption
                        self._dups.setdefault(key, []).append(b)
                    else:
                        cache[key] = b
                    continue
                key = self.block_key(req, j)
                bh[b] = key
                if key in cache:
                    self._dups.setdefault(key, []).append(b)
                else:
                    cache[key] = b
        req.num_registered = full

    def prompt_content_blocks(self, req: Request) -> int:
        """Leading blocks whose content comes from the request's prompt content (shareable)."""
        return 0 if req.content is None else req.prompt_tokens // self.block_size

    def _evict(self, b: int, key: int) -> None:
        self.block_hash[b] = None
        self.evictions += 1
        if self.cache.get(key) == b:
            extra = self._dups.get(key)
            if extra:  # the next block registered under this hash, as vLLM's per-hash dict
                self.cache[key] = extra.pop(0)
                if not extra:
                    del self._dups[key]
            else:
                del self.cache[key]
        else:
            self._dups[key].remove(b)
            if not self._dups[key]:
                del self._dups[key]

    # ---- allocation -----------------------------------------------------------------------------
    def get_new_blocks(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the free queue's front (the end for ``stack``); ref count 1.

        A popped block that still carries a hash is evicted from the prefix cache (counted).
        Hot path: the queue walk, the eviction check and the ref count share one loop.
        """
        if self._stack:
            popped = self.free_queue.pop_n(n)
            for b in popped:
                self.ref[b] = 1
            return popped
        fq = self.free_queue
        nxt, head = fq._next, fq._head
        ref, bh, cache, dups = self.ref, self.block_hash, self.cache, self._dups
        out: list[int] = []
        add = out.append
        b = nxt[head]
        for _ in range(n):
            add(b)
            key = bh[b]
            if key is not None:
                if not dups and cache.get(key) == b:  # common case of _evict, inlined
                    bh[b] = None
                    del cache[key]
                    self.evictions += 1
                else:
                    self._evict(b, key)
            ref[b] = 1
            b = nxt[b]
        nxt[head] = b
        fq._prev[b] = head
        fq.size -= n
        return out

    def touch(self, blocks: Iterable[int]) -> None:
        ref, fq = self.ref, self.free_queue
        for b in blocks:
            if ref[b] == 0:
                fq.remove(b)
            else:
                self.shared_excess += 1
            ref[b] += 1

    def can_allocate(
        self,
        req: Request,
        num_new_tokens: int,
        hit_blocks: Sequence[int] = (),
        *,
        full_sequence_must_fit: bool = False,
        apply_watermark: bool = False,
        free: int | None = None,
    ) -> int:
        """Blocks to take from the free queue for this allocation, or -1 if they are not there.

        Hits whose ref count is 0 sit in the free queue and count against capacity (s2 rule 1).
        ``free`` overrides the current free count (used to look ahead without mutating).
        """
        B = self.block_size
        nhit = len(hit_blocks)
        held = len(req.blocks) + nhit
        hit_free = sum(1 for b in hit_blocks if self.ref[b] == 0) if nhit else 0
        if free is None:
            free = self.free_queue.size
        wm = self.watermark_blocks if apply_watermark else 0
        if full_sequence_must_fit:
            need_full = max(cdiv(req.num_tokens, B) - held, 0) + hit_free
            if need_full + wm > free:
                return -1
        slots = req.num_computed_tokens + nhit * B + num_new_tokens
        need = max(cdiv(slots, B) - held, 0)
        if need + hit_free + wm > free:
            return -1
        return need

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        hit_blocks: Sequence[int] = (),
        *,
        full_sequence_must_fit: bool = False,
        apply_watermark: bool = False,
    ) -> bool:
        """Give ``req`` slots for ``num_new_tokens`` more tokens; all-or-nothing.

        ``hit_blocks`` are prefix-cache hits adopted now (new or resumed request). Returns
        False and changes nothing when the blocks are not there.
        """
        need = self.can_allocate(req, num_new_tokens, hit_blocks,
                                 full_sequence_must_fit=full_sequence_must_fit,
                                 apply_watermark=apply_watermark)
        if need < 0:
            return False
        if hit_blocks:
            self.touch(hit_blocks)
            req.blocks.extend(hit_blocks)
        if need:
            req.blocks.extend(self.get_new_blocks(need))
        if self.enable_caching:
            slots = req.num_computed_tokens + len(hit_blocks) * self.block_size + num_new_tokens
            self._register(req, min(slots, req.num_tokens))
        return True

    def free(self, req: Request) -> None:
        """Release all of ``req``'s blocks (tail first; see module docstring for placement)."""
        ref, bh = self.ref, self.block_hash
        front: list[int] = []
        tail: list[int] = []
        to_front, to_tail = front.append, tail.append
        split = self.free_order == "front-tail"
        order = req.blocks if self._stack else reversed(req.blocks)
        for b in order:
            r = ref[b] - 1
            ref[b] = r
            if r > 0:
                self.shared_excess -= 1
            elif split and bh[b] is None:
                to_front(b)
            else:
                to_tail(b)
        self.free_queue.prepend_n(front)
        self.free_queue.append_n(tail)
        req.blocks = []
        req.num_registered = 0

    def fork(self, src: Request, dst: Request) -> None:
        """paper-v0 sharing: ``dst`` gets a copy of ``src``'s table; every block's ref count +1."""
        self.retable([(dst, list(src.blocks))])

    def retable(self, moves: list[tuple[Request, list[int]]]) -> None:
        """Give each request a new block table (beam re-forks), all at once.

        All new references are taken before any old one is dropped, so a table that is both
        given away and replaced in the same round never sends a block to the free queue.
        """
        for _, table in moves:
            self.touch(table)
        for req, table in moves:
            if req.blocks:
                self.free(req)
            req.blocks = table

    def copy_on_write(self, req: Request) -> bool:
        """Before writing into a shared last block: give ``req`` a private copy. False if no block."""
        last = req.blocks[-1]
        if self.ref[last] <= 1:
            return True
        if self.free_queue.size < 1:
            return False
        (new,) = self.get_new_blocks(1)
        self.ref[last] -= 1
        self.shared_excess -= 1
        req.blocks[-1] = new
        return True

    def exact_breakdown(self, live: Iterable[Request]) -> tuple[int, int, int, int, int]:
        """Memory categories when shared blocks may be partial (fork/copy-on-write mode).

        A physical block's token states are the most tokens any holder has in it.
        """
        B = self.block_size
        fill: dict[int, int] = {}
        for r in live:
            c = r.num_computed_tokens
            for j, b in enumerate(r.blocks):
                f = min(B, max(c - j * B, 0))
                if f > fill.get(b, -1):
                    fill[b] = f
        free = self.free_queue.size
        used = self.usable_blocks - free
        tok = sum(fill.values())
        null = (self.num_blocks - self.usable_blocks) * B
        return tok, 0, used * B - tok, null, free * B

    # ---- invariants -----------------------------------------------------------------------------
    def check(self, live: Iterable[Request] = ()) -> None:
        """Raise AssertionError if the pool's state is inconsistent (tests call this every step)."""
        N = self.num_blocks
        fq = self.free_queue
        in_q = fq.to_list()
        assert len(in_q) == fq.size == len(set(in_q)), "free queue size/duplicates"
        counted = [0] * N
        for r in live:
            for b in r.blocks:
                counted[b] += 1
        assert all(x >= 0 for x in self.ref), "negative ref count"
        if live is not None:
            assert counted == self.ref, "ref counts != block-table references"
        used = sum(1 for x in self.ref if x > 0)
        null = 1 if self.null_block == 0 else 0
        assert used + fq.size + null == N, f"blocks not conserved: {used}+{fq.size}+{null} != {N}"
        for b in in_q:
            assert self.ref[b] == 0 and b != self.null_block, f"block {b} in free queue but in use"
        assert self.shared_excess == sum(max(x - 1, 0) for x in self.ref), "shared excess drift"
        for key, b in self.cache.items():
            assert self.block_hash[b] == key, "cache map points at a block with another hash"
        n_hashed = sum(1 for h in self.block_hash if h is not None)
        assert n_hashed == len(self.cache) + sum(len(v) for v in self._dups.values()), "hash map size"
