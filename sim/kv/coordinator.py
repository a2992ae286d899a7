"""Hybrid KV allocator: several KV-cache groups over one block pool (vLLM 0.33's hybrid manager).

Models that mix sliding-window (or chunked-local) layers with full-attention ones -- Gemma-3,
gpt-oss, Llama-4 -- get one KV-cache group per ``layers_per_block`` layers of a kind
(:func:`sim.model.attention.kv_cache_groups`). All groups take blocks from one
:class:`~sim.kv.block_pool.BlockPool` with a common page size; a request holds one table per
group (:class:`~sim.kv.hybrid_table.HybridTable`), and every count this allocator answers is
summed over the groups. Followed, file by file (vLLM source, ``vllm/v1/core/``):

* ``kv_cache_manager.py:KVCacheManager.allocate_slots``: release the blocks a window skips
  (even when the allocation then fails), count ``get_num_blocks_to_allocate`` over all groups
  against the free blocks, adopt the hit (touch, null-padding the skipped part), take new blocks
  group by group, register full blocks group by group. ``free``: group by group, tail first.
* ``single_type_kv_cache_manager.py``: the per-kind rules (:mod:`sim.kv.window`) and the block
  count (a hit block with ref count 0 leaves the free queue, so it counts; the full-sequence
  admission check caps a windowed group at ``max_admission_blocks_per_request``).
* ``kv_cache_coordinator.py:HybridKVCacheCoordinator.find_longest_cache_hit``:
  :mod:`sim.kv.hybrid_hits`.

Because a window can release a block on any decode step, the scheduler calls :meth:`allocate`
for every running request every step (``allocates_every_step``; vLLM calls ``allocate_slots``
every step), and decode fast-forward is off for this allocator (``sim.run.build``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sim.kv.base import MemoryBreakdown
from sim.kv.block_table import BlockTable
from sim.kv.connector import KvConnector
from sim.kv.hybrid_hits import longest_hit
from sim.kv.hybrid_table import GroupHits, HybridTable
from sim.kv.manager import KvCacheManager
from sim.kv.window import NULL, KvGroup, Lookup, skipped_tokens
from sim.request import Request


class HybridAllocator(KvCacheManager):
    """KV-cache groups sharing one pool; implements :class:`~sim.kv.base.KvAllocator` (the
    N-group :class:`~sim.kv.manager.KvCacheManager`)."""

    #: no bulk decode: a window group releases blocks on any step (``allocates_every_step``),
    #: so these models run step by step
    decode_blocks = None
    sharing = None    # fork + copy-on-write is a one-group mechanism
    layout = None     # a memory map draws one group

    def __init__(self, num_blocks: int, block_size: int, groups: Sequence[KvGroup], *,
                 free_order: str = "front-tail", enable_caching: bool = True) -> None:
        super().__init__(num_blocks, block_size, groups, free_order=free_order, enable_caching=enable_caching)
        by_spec: dict[KvGroup, list[int]] = {}
        for i, g in enumerate(self.groups):
            by_spec.setdefault(g, []).append(i)
        self._specs = sorted(by_spec.items(), key=lambda s: s[0].windowed)  # full attention first
        self._simple = len(self._specs) == 2 and not self._specs[0][0].windowed

    def connect(self, connector: KvConnector) -> None:
        raise ValueError("a KV connector over several KV-cache groups is not modelled")

    def group_tables(self, req: Request) -> list[BlockTable]:
        return self._handle(req).tables

    # ---- capacity (num_free_blocks, usage, evictions, shared_excess: PoolCounters) ----------

    def _handle(self, req: Request) -> HybridTable:
        t = req.kv
        if t is None:
            t = req.kv = HybridTable([BlockTable() for _ in self.groups])
        return t

    def num_held_blocks(self, req: Request) -> int:
        t = req.kv
        return 0 if t is None else sum(len(tg.blocks) for tg in t.tables) - t.nulls

    def never_fits(self, req: Request) -> str:
        blocks = -(-req.final_tokens // self.block_size)
        need = sum(min(blocks, g.admission_cap) if g.admission_cap else blocks for g in self.groups)
        return f"needs {need} blocks > KV pool of {self.usable_blocks}" if need > self.usable_blocks else ""

    # ---- prefix cache -------------------------------------------------------------------------
    def _lookup(self, req: Request, ids: list[int]) -> Lookup:
        first, key, cache, G = self._handle(req).tables[0], self.hasher.key, self.pool.cache, len(self.groups)

        def lookup(j: int) -> list[int] | None:
            k = key(req, first, j) * G
            out = []
            for g in ids:
                b = cache.get(k + g)
                if b is None:
                    return None
                out.append(b)
            return out

        return lookup

    def find_longest_cache_hit(self, req: Request, max_len: int) -> tuple[list[list[int]], int]:
        """Per-group hit blocks and the hit in tokens (:func:`sim.kv.hybrid_hits.longest_hit`)."""
        return longest_hit(self._specs, self._simple, lambda ids: self._lookup(req, ids),
                           len(self.groups), max_len, self.block_size)

    def get_computed_blocks(self, req: Request) -> list[int]:
        """Longest hit common to all groups, capped at ``num_tokens - 1`` (a :class:`GroupHits`)."""
        if not self.enable_caching:
            return []
        per_group, hit = self.find_longest_cache_hit(req, req.num_tokens - 1)
        return GroupHits(per_group) if hit else []

    # ---- allocation ---------------------------------------------------------------------------
    def _need(self, t: HybridTable, num_tokens: int, hits: Sequence[int], computed: int, cap: bool) -> int:
        """``get_num_blocks_to_allocate`` summed over the groups; ``computed`` counts the hit."""
        B, ref = self.block_size, self.pool.ref
        hit_groups = hits.groups if isinstance(hits, GroupHits) else None
        assert hit_groups is not None or not hits, "hybrid hits come from get_computed_blocks"
        n = 0
        for g, spec in enumerate(self.groups):
            required = -(-num_tokens // B)
            if cap and spec.admission_cap:
                required = min(required, spec.admission_cap)
            nreq = len(t.tables[g].blocks)
            hg = hit_groups[g] if hit_groups is not None else []
            skipped = skipped_tokens(spec, computed) // B
            n += max(required - max(skipped, len(hg) + nreq), 0)
            for b in hg[max(0, skipped - nreq):]:
                if b != NULL and ref[b] == 0:  # a cached hit in the free queue leaves it
                    n += 1
        return n

    def blocks_needed(self, req: Request, num_tokens: int, hits: Sequence[int] = ()) -> int:
        """Free blocks for ``num_tokens`` in all (the full-sequence admission check: windowed
        groups capped at their ``admission_cap``)."""
        t = self._handle(req)
        return self._need(t, num_tokens, hits, req.num_computed_tokens + len(hits) * self.block_size, True)

    def _releasable(self, t: HybridTable, computed: int) -> int:
        """Blocks :meth:`_remove_skipped` would release now."""
        n = 0
        for g, spec in enumerate(self.groups):
            if spec.windowed:
                blocks = t.tables[g].blocks
                for i in range(min(skipped_tokens(spec, computed) // self.block_size, len(blocks)) - 1, -1, -1):
                    if blocks[i] == NULL:
                        break
                    n += 1
        return n

    def _remove_skipped(self, t: HybridTable, computed: int) -> None:
        """Release the blocks the windows skip; their table entries become the null block."""
        for g, spec in enumerate(self.groups):
            if not spec.windowed:
                continue
            blocks = t.tables[g].blocks
            removed: list[int] = []
            for i in range(min(skipped_tokens(spec, computed) // self.block_size, len(blocks)) - 1, -1, -1):
                if blocks[i] == NULL:
                    break  # the ones before were released by an earlier call
                removed.append(blocks[i])
                blocks[i] = NULL
            if removed:
                t.nulls += len(removed)
                removed.reverse()  # release() walks tables tail first: highest index first, as vLLM
                self.pool.release(removed)

    def can_allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                     *, reserve: int = 0) -> int:
        t = self._handle(req)
        computed = req.num_computed_tokens + len(hits) * self.block_size
        need = self._need(t, computed + num_new_tokens, hits, computed, False)
        if need + reserve > self.pool.free_queue.size + self._releasable(t, computed):
            return -1
        return need

    def allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                 *, reserve: int = 0, cache: bool = True) -> bool:
        """vLLM's ``allocate_slots``: window release first (kept even on failure), then
        all-or-nothing."""
        t = self._handle(req)
        B = self.block_size
        computed = req.num_computed_tokens + len(hits) * B
        self._remove_skipped(t, computed)
        slots = computed + num_new_tokens
        if self._need(t, slots, hits, computed, False) + reserve > self.pool.free_queue.size:
            return False
        if isinstance(hits, GroupHits):
            self._adopt(t, hits, computed)
        want = -(-slots // B)
        for tg in t.tables:
            if want > len(tg.blocks):
                tg.blocks.extend(self.pool.get_new_blocks(want - len(tg.blocks)))
        if cache and self.enable_caching:
            self.register_full_blocks(req, min(slots, req.num_tokens))
        return True

    def _adopt(self, t: HybridTable, hits: GroupHits, computed: int) -> None:
        """Touch every group's hit blocks, then add them, the skipped part as null blocks."""
        skip = [skipped_tokens(spec, computed) // self.block_size for spec in self.groups]
        for g, hg in enumerate(hits.groups):
            self.pool.touch([b for b in hg[skip[g]:] if b != NULL])
        for g, hg in enumerate(hits.groups):
            tg = t.tables[g]
            tg.blocks.extend([NULL] * skip[g])
            tg.blocks.extend(hg[skip[g]:])
            tg.num_registered = len(tg.blocks)
            t.nulls += skip[g]

    def _cache(self, req: Request, t: HybridTable, num_tokens: int) -> None:
        """Register each group's blocks that ``num_tokens`` tokens fill (null blocks skipped)."""
        full = num_tokens // self.block_size
        pool, G, key, first = self.pool, len(self.groups), self.hasher.key, t.tables[0]
        bh, cache = pool.block_hash, pool.cache
        for g, tg in enumerate(t.tables):
            for j in range(tg.num_registered, full):
                b = tg.blocks[j]
                if b == NULL or bh[b] is not None:
                    continue
                k = bh[b] = key(req, first, j) * G + g
                if k in cache:
                    pool.dups.setdefault(k, []).append(b)
                else:
                    cache[k] = b
            if full > tg.num_registered:
                tg.num_registered = full

    def register_full_blocks(self, req: Request, num_tokens: int) -> None:
        if self.enable_caching:
            self._cache(req, self._handle(req), num_tokens)

    def free(self, req: Request) -> None:
        """Release every group's blocks, group by group, each table tail first."""
        super().free(req)
        if req.kv is not None:
            req.kv.nulls = 0

    # ---- memory -------------------------------------------------------------------------------
    def breakdown(self, live: Iterable[Request], computed_tokens: int,
                  *, waiting: Request | None = None) -> MemoryBreakdown:
        """Token slots by category. A computed token fills one slot in every group except where
        a window has released its block; shared (hit) blocks are full and counted once; the
        null block is external fragmentation (any free block serves ``waiting``)."""
        B = self.block_size
        free = self.pool.free_queue.size
        used = self.usable_blocks - free
        nulls = sum(r.kv.nulls for r in live if r.kv is not None)
        tok = len(self.groups) * computed_tokens - (nulls + self.pool.shared_excess) * B
        return MemoryBreakdown(tok, 0, used * B - tok, (self.num_blocks - self.usable_blocks) * B, free * B)

    # ---- invariants ---------------------------------------------------------------------------
    def check(self, live: Iterable[Request] = ()) -> None:
        """Raise AssertionError if the pool or a live request's tables are inconsistent."""
        B = self.block_size
        live = list(live)
        for r in live:
            t = r.kv
            if t is None:
                continue
            assert len({len(tg.blocks) for tg in t.tables}) == 1, f"request {r.uid}: group tables differ in length"
            nulls = 0
            for spec, tg in zip(self.groups, t.tables, strict=True):
                lead = next((i for i, b in enumerate(tg.blocks) if b != NULL), len(tg.blocks))
                assert NULL not in tg.blocks[lead:], f"request {r.uid}: a null block inside the window"
                assert lead * B <= skipped_tokens(spec, r.num_computed_tokens), \
                    f"request {r.uid}: a {spec.kind} group released a block it still reads"
                assert len(tg.blocks) * B >= r.num_computed_tokens, f"request {r.uid}: computed tokens without slots"
                nulls += lead
            assert nulls == t.nulls, f"request {r.uid}: null count drift"
        super().check(live)
