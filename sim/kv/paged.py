"""Paged KV allocator: vLLM 0.33's KVCacheManager for one full-attention KV-cache group.

Requests hold :class:`~sim.kv.block_table.BlockTable` handles (``Request.kv``) into a shared
:class:`~sim.kv.block_pool.BlockPool`; block contents are keyed by
:class:`~sim.kv.hashing.BlockHasher`. The allocator is mechanism: it says how many blocks an
allocation takes and takes them; which request to admit, preempt or resume, and how much
headroom to keep, is decided in :mod:`sim.sched`.

Several groups (sliding windows, hybrid models): :mod:`sim.kv.coordinator`. Fork and
copy-on-write (paper-v0): :mod:`sim.kv.sharing`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import chain

from sim.compiled import compiled
from sim.kv.base import LinearBreakdown, MemoryBreakdown, cdiv
from sim.kv.block_pool import UNPUBLISHED
from sim.kv.block_table import BlockTable, table_of
from sim.kv.connector import KvConnector
from sim.kv.hashing import UNIQUE_BASE, shared_prefix_blocks, unique_key
from sim.kv.layout import PagedLayout
from sim.kv.manager import KvCacheManager
from sim.kv.margin import Margin
from sim.kv.sharing import ForkSharing
from sim.kv.window import KvGroup
from sim.request import Request

_breakdown = partial(tuple.__new__, MemoryBreakdown)  # MemoryBreakdown from a tuple, fast
TABLE_LOOPS = compiled("sim.kv._table_loops")  # read by each new allocator (tests set it to compare both)


class PagedAllocator(KvCacheManager):
    """Block pool with a prefix cache (see :mod:`sim.kv.block_pool` for the free order): the
    one-group :class:`~sim.kv.manager.KvCacheManager`, its arithmetic inlined."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        null_block: bool = True,
        free_order: str = "front-tail",
        enable_caching: bool = True,
        exact_fill: bool = False,
    ) -> None:
        super().__init__(num_blocks, block_size, (KvGroup(),), null_block=null_block, free_order=free_order,
                         enable_caching=enable_caching)
        self.exact_fill = exact_fill  # shared blocks may be partial (fork mode): see breakdown
        self._null_slots = (num_blocks - self.usable_blocks) * block_size
        self.sharing = ForkSharing(self)
        self.layout = PagedLayout(self)
        self.headroom = self._margin = Margin()
        # the blocks of a request without prompt content enter the map only if it is freed
        # before it finishes (block_pool's docstring); not where more than its own probe could
        # read them (a KV connector, KV events: both turn it off), nor with fork sharing or the
        # tail / stack free orders (vllm-v1-legacy, paper-v0)
        self.lazy_unique = enable_caching and free_order == "front-tail" and not exact_fill
        # the per-request loops at a block boundary, compiled (sim/kv/_table_loops.c), or None
        self._append_each: Callable[[list[Request], list[int]], None] | None = \
            getattr(TABLE_LOOPS, "append_each", None)
        self._register_decoded: Callable[..., None] | None = getattr(TABLE_LOOPS, "register_decoded", None)
        self._mark_blocks: Callable[..., None] | None = getattr(TABLE_LOOPS, "mark_blocks", None)

    def connect(self, connector: KvConnector) -> None:
        self.lazy_unique = False  # the connector keys what it stores by the map's keys
        super().connect(connector)

    def group_tables(self, req: Request) -> list[BlockTable]:
        return [table_of(req)]

    def _first_table(self, req: Request) -> BlockTable:
        return table_of(req)

    # ---- capacity (num_free_blocks, usage, evictions, shared_excess: PoolCounters) ----------

    def num_held_blocks(self, req: Request) -> int:
        t = req.kv
        return 0 if t is None else len(t.blocks)

    def never_fits(self, req: Request) -> str:
        need = cdiv(req.final_tokens, self.block_size)
        return f"needs {need} blocks > KV pool of {self.usable_blocks}" if need > self.usable_blocks else ""

    # ---- prefix cache -------------------------------------------------------------------------
    def get_computed_blocks(self, req: Request) -> list[int]:
        """Longest cached prefix, capped at ``num_tokens - 1`` and counted in whole blocks."""
        if not self.enable_caching:
            return []
        hits: list[int] = []
        cache = self.pool.cache
        n = (req.num_tokens - 1) // self.block_size
        if req.content is None:  # every key is arithmetic: unique_key(uid, j) == u0 - j
            u0 = unique_key(req.uid, 0)
            for j in range(n):
                b = cache.get(u0 - j)
                if b is None:
                    break
                hits.append(b)
            return hits
        table, key = table_of(req), self.hasher.key
        for j in range(n):
            b = cache.get(key(req, table, j))
            if b is None:
                break
            hits.append(b)
        return hits

    def register_decoded_blocks(self, reqs: list[Request], ahead: int) -> None:
        """:meth:`register_full_blocks` up to ``num_computed_tokens + ahead`` for each request
        (fast-forward: decoders whose last block fills this step; one call per step)."""
        if self._register_decoded is not None:  # the loop below, compiled
            self._register_decoded(reqs, ahead, self.block_size, self.pool.block_hash,
                                   UNPUBLISHED if self.lazy_unique else None, self._register_decoded_one)
            return
        bh = self.pool.block_hash
        B, lazy = self.block_size, self.lazy_unique
        for r in reqs:
            upto = r.num_computed_tokens + ahead
            table = r.kv
            j = table.num_registered
            if lazy and r.content is None and upto // B == j + 1 and bh[table.blocks[j]] is None:
                bh[table.blocks[j]] = UNPUBLISHED  # one unique block, marked (register_full_blocks)
                table.num_registered = j + 1
            else:
                self._register_decoded_one(r, upto)

    def _register_decoded_one(self, r: Request, upto: int) -> None:
        """:meth:`register_decoded_blocks` for one request, unless its block was only marked."""
        table = r.kv
        j = table.num_registered
        bh = self.pool.block_hash
        if r.content is None and upto // self.block_size == j + 1 and bh[table.blocks[j]] is None:
            b = table.blocks[j]  # one unique block: == register_full_blocks, inlined
            if self.lazy_unique:
                bh[b] = UNPUBLISHED
            else:
                cache = self.pool.cache
                key = bh[b] = -(r.uid * UNIQUE_BASE + j + 1)
                if key in cache:
                    self.pool.dups.setdefault(key, []).append(b)
                else:
                    cache[key] = b
            table.num_registered = j + 1
        else:
            self.register_full_blocks(r, upto)

    def register_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Publish the blocks that ``num_tokens`` tokens fill to the prefix cache (schedule time).

        Blocks past the shared prompt content are unique to the request: their key is
        arithmetic (no hashing, never shared with another request). A request without content
        only marks its blocks (``lazy_unique``; they enter the map in :meth:`free`).
        """
        table = req.kv
        full = num_tokens // self.block_size
        j0 = table.num_registered
        if full <= j0:
            return
        table.num_registered = full
        if req.content is None and self.lazy_unique:  # hits keep their keys; new blocks wait
            if self._mark_blocks is not None:  # the loop below, compiled
                self._mark_blocks(self.pool.block_hash, table.blocks, j0, full, UNPUBLISHED)
                return
            bh, unpub = self.pool.block_hash, UNPUBLISHED
            for b in table.blocks[j0:full]:
                if bh[b] is None:
                    bh[b] = unpub
            return
        if full == j0 + 1 and req.content is None:  # one unique block: the decode hot path
            b = table.blocks[j0]
            bh = self.pool.block_hash
            if bh[b] is None:
                key = bh[b] = -(req.uid * UNIQUE_BASE + j0 + 1)  # unique_key(uid, j0)
                cache = self.pool.cache
                if key in cache:  # the request's own block from before a preemption
                    self.pool.dups.setdefault(key, []).append(b)
                else:
                    cache[key] = b
            return
        pool = self.pool
        blocks, bh, cache = table.blocks, pool.block_hash, pool.cache
        unique0 = -(req.uid * UNIQUE_BASE + 1)  # unique_key(uid, j) == unique0 - j
        if not j0 and req.content is None and not req.num_preemptions and type(cache) is dict and not pool.stack:
            # a first admission without content: fresh blocks (popped ones are evicted, except
            # paper-v0's stack order), keys this pool has never seen (unique to the request), so
            # no duplicate and no hit to skip -- in bulk
            keys = list(range(unique0, unique0 - full, -1))  # one int object per key, shared by the map and block_hash
            fresh = blocks[:full]
            cache.update(zip(keys, fresh, strict=True))
            for b, key in zip(fresh, keys, strict=True):
                bh[b] = key
            return
        shared_upto = shared_prefix_blocks(req, self.block_size)
        for j in range(j0, full):
            b = blocks[j]
            if bh[b] is None:  # == pool.cache_block(b, key), inlined (prompt registration)
                key = bh[b] = unique0 - j if j >= shared_upto else self.hasher.key(req, table, j)
                if key in cache:
                    pool.dups.setdefault(key, []).append(b)
                else:
                    cache[key] = b

    # ---- allocation ---------------------------------------------------------------------------
    def blocks_needed(self, req: Request, num_tokens: int, hits: Sequence[int] = ()) -> int:
        t = req.kv
        held = (0 if t is None else len(t.blocks)) + len(hits)
        hit_free = self.pool.num_free_among(hits) if hits else 0
        return max(-(-num_tokens // self.block_size) - held, 0) + hit_free  # cdiv, inlined

    def can_allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                     *, reserve: int = 0) -> int:
        """New blocks for ``num_new_tokens`` more tokens, or -1 if they are not free.

        Hits whose ref count is 0 sit in the free queue and count against capacity (s2 rule 1).
        """
        nhit = len(hits)
        t = req.kv
        held = (0 if t is None else len(t.blocks)) + nhit
        slots = req.num_computed_tokens + nhit * self.block_size + num_new_tokens
        need = max(-(-slots // self.block_size) - held, 0)  # cdiv, inlined
        hit_free = self.pool.num_free_among(hits) if nhit else 0
        if not self._margin.note(self.pool.free_queue.size - need - hit_free - reserve):
            return -1
        return need

    def allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                 *, reserve: int = 0, cache: bool = True) -> bool:
        """Give ``req`` slots for ``num_new_tokens`` more tokens; all-or-nothing.

        ``hits`` are prefix-cache hits adopted now (new or resumed request). Returns False and
        changes nothing when the blocks are not there. ``cache=False``: publish nothing yet (an
        asynchronous load: its blocks are registered when it arrives).
        """
        need = self.can_allocate(req, num_new_tokens, hits, reserve=reserve)
        if need < 0:
            return False
        table = table_of(req)
        if hits:
            self.pool.touch(hits)
            table.blocks.extend(hits)
        if need:
            table.blocks.extend(self.pool.get_new_blocks(need))
        if cache and self.enable_caching:
            slots = req.num_computed_tokens + len(hits) * self.block_size + num_new_tokens
            self.register_full_blocks(req, min(slots, req.num_tokens))
        return True

    @property
    def decode_blocks(self) -> PagedAllocator:
        return self

    def append_block(self, reqs: list[Request]) -> None:
        """Give each request one new block, in order (the caller checked there are enough)."""
        if len(reqs) == 1:
            reqs[0].kv.blocks.append(self.pool.pop_one())
            return
        if self._append_each is not None:  # the loop below, compiled
            self._append_each(reqs, self.pool.get_new_blocks(len(reqs)))
            return
        for r, b in zip(reqs, self.pool.get_new_blocks(len(reqs)), strict=True):
            r.kv.blocks.append(b)

    def append_blocks(self, steps: list[list[Request]], n: int) -> None:
        new, g = self.pool.get_new_blocks(n), steps[0]
        if all(x is g for x in steps):  # one bucket of k: request i takes new[i], new[i + k], ...
            assert n == len(g) * len(steps), "pops for another number of crossings"
            for i, r in enumerate(g):
                r.kv.blocks.extend(new[i::len(g)])
        else:
            for r, b in zip(chain.from_iterable(steps), new, strict=True):
                r.kv.blocks.append(b)

    def free(self, req: Request) -> None:
        """Release all of ``req``'s blocks (hashes are content: they stay for a later hit)."""
        table = req.kv
        if table is None:
            return
        if self.lazy_unique and req.content is None and req.num_output < req.output_tokens:
            self._publish(req, table)  # it comes back (a preemption): its probe must find them
        self.pool.release(table.blocks)
        table.blocks, table.num_registered = [], 0

    def _publish(self, req: Request, table: BlockTable) -> None:
        """Enter the request's unpublished blocks in the map under their keys, in table order."""
        bh, cache_block = self.pool.block_hash, self.pool.cache_block
        u0 = unique_key(req.uid, 0)
        for j, b in enumerate(table.blocks[:table.num_registered]):
            if bh[b] is UNPUBLISHED:
                cache_block(b, u0 - j)

    # ---- memory -------------------------------------------------------------------------------
    def breakdown(self, live: Iterable[Request], computed_tokens: int,
                  *, waiting: Request | None = None) -> MemoryBreakdown:
        """Held blocks hold ``computed_tokens`` token states; the rest of them is internal
        fragmentation; the null block is external (any free block serves ``waiting``). With ``exact_fill`` (fork mode, where a
        shared block may be partial) a block's token states are the most any holder has in it.
        """
        if self.exact_fill:
            return self._exact_breakdown(live)
        B = self.block_size
        pool = self.pool
        free = pool.free_queue.size
        used = self.usable_blocks - free
        internal = (used + pool.shared_excess) * B - computed_tokens
        return _breakdown((used * B - internal, 0, internal, self._null_slots, free * B))

    def linear_breakdown(self) -> LinearBreakdown | None:
        """:meth:`breakdown`'s constants (fork mode's exact fill is not linear)."""
        return None if self.exact_fill else LinearBreakdown(self.block_size, self.usable_blocks, self._null_slots)

    def _exact_breakdown(self, live: Iterable[Request]) -> MemoryBreakdown:
        B = self.block_size
        fill: dict[int, int] = {}
        for r in live:
            c = r.num_computed_tokens
            for j, b in enumerate(r.kv.blocks if r.kv is not None else ()):
                f = min(B, max(c - j * B, 0))
                if f > fill.get(b, -1):
                    fill[b] = f
        free = self.pool.free_queue.size
        used = self.usable_blocks - free
        tok = sum(fill.values())
        null = (self.num_blocks - self.usable_blocks) * B
        return _breakdown((tok, 0, used * B - tok, null, free * B))
