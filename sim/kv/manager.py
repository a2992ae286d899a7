"""What every paged allocator shares: N KV-cache groups over one block pool (vLLM 0.33's
``KVCacheCoordinator`` + ``BlockPool``), whatever the number of groups.

    KvCacheManager               pool, hasher, capacity counters, content keys, the KV connector
      |                          hook, release of every group's tables, the reference check
      +-- PagedAllocator         one full-attention group (vLLM's ``UnitaryKVCacheCoordinator``)
      +-- HybridAllocator        several groups, sliding-window / chunked-local among them

A request's table for group g is a :class:`~sim.kv.block_table.BlockTable`; the content key
of logical block j is the same in every group (it depends on the tokens only) and the pool
caches block j of group g under ``key * num_groups + g`` -- for one group, the key itself.
A coordinator of one full-attention group therefore makes the same decisions with the same
block ids as the paged allocator (``tests/test_kv_contract.py`` drives both with the same
operations and compares). What stays in the subclasses is the per-step arithmetic: the paged
allocator inlines its one group -- the hit walk, ``blocks_needed`` / ``can_allocate`` /
``allocate``, registration with arithmetic keys for unique blocks, a one-table ``free`` and the
bulk-decode view fast-forward needs -- because that is the engine's hot path; the hybrid one walks
its groups (window release, per-spec hits). Running the bench configuration (3,000 Azure conv
requests, Llama-2-70B TP 2) on a coordinator of one group instead gives the same steps and
preemptions at 1.4x the CPU time with exact steps and 3.2x by default (no bulk decode).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sim.kv.block_pool import BlockPool, PoolCounters
from sim.kv.block_table import BlockTable
from sim.kv.connector import KvConnector
from sim.kv.hashing import BlockHasher
from sim.kv.margin import Margin
from sim.kv.window import KvGroup
from sim.request import Request


class KvCacheManager(PoolCounters):
    """The mechanism shared by the paged allocators (see the module docstring)."""

    paged = True
    lazy_unique = False  # content-less blocks enter the map only when needed (PagedAllocator)

    def __init__(self, num_blocks: int, block_size: int, groups: Sequence[KvGroup], *, null_block: bool = True,
                 free_order: str = "front-tail", enable_caching: bool = True) -> None:
        if not groups:
            raise ValueError("a KV-cache manager needs at least one KV-cache group")
        self.pool = BlockPool(num_blocks, null_block=null_block, free_order=free_order)
        self.hasher = BlockHasher(block_size)
        self.num_blocks = num_blocks
        self.usable_blocks = self.pool.usable_blocks
        self.block_size = block_size
        self.groups = tuple(groups)
        self.enable_caching = enable_caching
        self.allocates_every_step = any(g.windowed for g in self.groups)
        self.connector: KvConnector | None = None
        self.headroom: Margin | None = None  # the one-group PagedAllocator records it

    # ---- a request's tables (the subclass's handle) --------------------------------------------
    def group_tables(self, req: Request) -> list[BlockTable]:
        """The request's table per group, created on first use."""
        raise NotImplementedError

    def _first_table(self, req: Request) -> BlockTable:
        return self.group_tables(req)[0]

    # ---- content keys and the KV connector ------------------------------------------------------
    def block_keys(self, req: Request, start: int, stop: int) -> list[int]:
        """Content keys of logical blocks ``start..stop`` (the keys they are cached under)."""
        table, key = self._first_table(req), self.hasher.key
        return [key(req, table, j) for j in range(start, stop)]

    def register_full_blocks(self, req: Request, num_tokens: int) -> None:
        raise NotImplementedError

    def connect(self, connector: KvConnector) -> None:
        """Tell ``connector`` of every registration (:meth:`register_full_blocks`, also from
        inside :meth:`allocate` and fast-forward's ``register_decoded_blocks``); without one
        the plain methods run untouched (hot path)."""
        if not self.enable_caching:
            raise ValueError("a KV connector keys blocks by the prefix cache: it needs prefix caching")
        self.connector = connector
        plain, save, first = self.register_full_blocks, connector.save_blocks, self._first_table

        def register(req: Request, num_tokens: int) -> None:
            t = first(req)
            before = t.num_registered
            plain(req, num_tokens)
            save(req, before, t.num_registered)

        def register_decoded(reqs: list[Request], ahead: int) -> None:
            for r in reqs:
                register(r, r.num_computed_tokens + ahead)

        self.register_full_blocks = register  # type: ignore[method-assign]
        self.register_decoded_blocks = register_decoded

    # ---- release and invariants -----------------------------------------------------------------
    def free(self, req: Request) -> None:
        """Release every group's blocks, group by group, each table tail first (null entries,
        where a window released a block, are skipped)."""
        if req.kv is None:
            return
        null = self.pool.null_block  # -1 without a null block: filters nothing
        for tg in self.group_tables(req):
            self.pool.release([b for b in tg.blocks if b != null])
            tg.blocks = []
            tg.num_registered = 0

    def check(self, live: Iterable[Request] = ()) -> None:
        """Raise AssertionError if the pool's ref counts differ from the references ``live``'s
        tables hold (every group; null entries hold none), or the connector is inconsistent."""
        counted = [0] * self.num_blocks
        null = self.pool.null_block
        for r in live:
            if r.kv is None:
                continue
            for tg in self.group_tables(r):
                for b in tg.blocks:
                    if b != null:
                        counted[b] += 1
        self.pool.check(counted)
        if self.connector is not None:
            self.connector.check()
