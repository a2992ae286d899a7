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

from collections.abc import Iterable, Sequence
from functools import partial
from itertools import chain

from sim.kv.base import LinearBreakdown, MemoryBreakdown, cdiv
from sim.kv.block_pool import UNPUBLISHED
from sim.kv.block_table import BlockTable, table_of
from sim.kv.connector import KvConnector
from sim.kv.layout import PagedLayout
from sim.kv.manager import KvCacheManager
from sim.kv.margin import Margin
from sim.kv.paged_prefix import PrefixRegistration
from sim.kv.sharing import ForkSharing
from sim.kv.table_loops import append_each, can_take, cross_pool, grow, new_blocks
from sim.kv.window import KvGroup
from sim.request import Request

_breakdown = partial(tuple.__new__, MemoryBreakdown)  # MemoryBreakdown from a tuple, fast
_COUNTING = ("allocate", "can_allocate", "blocks_needed")  # what fast-forward's window does inline


class PagedAllocator(PrefixRegistration, KvCacheManager):
    """Block pool with a prefix cache (see :mod:`sim.kv.block_pool` for the free order): the
    one-group :class:`~sim.kv.manager.KvCacheManager`, its arithmetic inlined; what enters the
    prefix cache, and when, is :class:`~sim.kv.paged_prefix.PrefixRegistration`'s."""

    #: its methods are these: the fused calls that stand in for them (:meth:`allocate`'s
    #: :func:`~sim.kv.table_loops.grow`, :meth:`cross_boundary`'s and :meth:`cross_call`'s
    #: :func:`~sim.kv.table_loops.cross_pool`) may be taken (a subclass: not said)
    plain_methods = True

    def __init_subclass__(cls, **kw: object) -> None:
        """A subclass may override any contract method (``can_allocate``, ``append_block``,
        ``register_decoded_blocks`` ...), and a fused call would go past it: every such path is
        off, with or without a C compiler, unless the subclass sets the flag in its own body."""
        super().__init_subclass__(**kw)
        if "plain_methods" not in vars(cls):
            cls.plain_methods = False

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
        null_slots = (num_blocks - self.usable_blocks) * block_size  # the null block: external
        self._lin = LinearBreakdown(block_size, self.usable_blocks, null_slots)  # breakdown's constants
        self.sharing = ForkSharing(self)
        self.layout = PagedLayout(self)
        self.headroom = self._margin = Margin()
        # the blocks of a request without prompt content enter the map only if it is freed
        # before it finishes (block_pool's docstring); not where more than its own probe could
        # read them (a KV connector, KV events: both turn it off), nor with fork sharing or the
        # tail / stack free orders (vllm-v1-legacy, paper-v0)
        self.lazy_unique = enable_caching and free_order == "front-tail" and not exact_fill
        # cross's pops are the free queue front's (not paper-v0's stack order), and it registers
        # past the methods a subclass or a connector may put in their place
        self._crosses = self.plain_methods and not self.pool.stack

    def connect(self, connector: KvConnector) -> None:
        self.lazy_unique = False  # the connector keys what it stores by the map's keys
        self._crosses = False  # and hears of each registration (KvCacheManager.connect): none bypassed
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

    # ---- allocation ---------------------------------------------------------------------------
    def blocks_needed(self, req: Request, num_tokens: int, hits: Sequence[int] = ()) -> int:
        need = new_blocks(req, num_tokens, len(hits), self.block_size)
        return need + self.pool.num_free_among(hits) if hits else need

    def can_allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                     *, reserve: int = 0) -> int:
        """New blocks for ``num_new_tokens`` more tokens, or -1 if they are not free.

        Hits whose ref count is 0 sit in the free queue and count against capacity (s2 rule 1).
        """
        return can_take(self.pool, self._margin, self.block_size, req, num_new_tokens, hits, reserve)

    def allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                 *, reserve: int = 0, cache: bool = True) -> bool:
        """Give ``req`` slots for ``num_new_tokens`` more tokens; all-or-nothing.

        ``hits`` are prefix-cache hits adopted now (new or resumed request). Returns False and
        changes nothing when the blocks are not there. ``cache=False``: publish nothing yet (an
        asynchronous load: its blocks are registered when it arrives).
        """
        if not hits and cache and self.lazy_unique and req.content is None and self.plain_methods:
            return grow(self.pool, self._margin, self.block_size, req, num_new_tokens, reserve)  # all below, in one call
        need = self.can_allocate(req, num_new_tokens, hits, reserve=reserve)
        if need < 0:
            return False
        table, pool = table_of(req), self.pool
        if hits:
            pool.touch(hits)
            table.blocks.extend(hits)
        if not (cache and self.enable_caching):
            if need:
                table.blocks.extend(pool.get_new_blocks(need))
            return True
        upto = min(req.num_computed_tokens + len(hits) * self.block_size + num_new_tokens, req.num_tokens)
        if need:
            table.blocks.extend(pool.get_new_blocks(need))
        self.register_full_blocks(req, upto)
        return True

    @property
    def decode_blocks(self) -> PagedAllocator | None:
        """Itself; None (exact steps, ``sim/run/build.py``) for a subclass that counts blocks
        its own way: fast-forward does its decoders' allocations from the pool's counts."""
        cls = type(self)
        plain = cls.plain_methods or all(getattr(cls, m) is getattr(PagedAllocator, m) for m in _COUNTING)
        return self if plain else None

    def append_block(self, reqs: list[Request]) -> None:
        """Give each request one new block, in order (the caller checked there are enough)."""
        if len(reqs) == 1:
            reqs[0].kv.blocks.append(self.pool.pop_one())
            return
        append_each(reqs, self.pool.get_new_blocks(len(reqs)))

    def cross_boundary(self, reqs: list[Request], ahead: int | None) -> None:
        """:meth:`append_block`, then (``ahead`` not None) :meth:`register_decoded_blocks`: a
        window step's block boundary. One call (:func:`~sim.kv.table_loops.cross_pool`) where it
        would make the same: its pops are :func:`~sim.kv.block_pool.pop_front`'s (not ``stack``,
        no duplicate keys, nobody logging them: ``BlockPool.observed``), its registrations heard
        by no connector and no subclass's methods to go past."""
        if self._crosses and cross_pool(reqs, self.pool, ahead, self.block_size,
                                        UNPUBLISHED if self.lazy_unique else None, self.register_full_blocks):
            return
        self.append_block(reqs)
        if ahead is not None:
            self.register_decoded_blocks(reqs, ahead)

    def cross_call(self) -> tuple[object, ...] | None:
        """:meth:`cross_boundary`'s one call, for a compiled caller to make itself (None: it has
        none): ``(cross_pool, pool, block_size, mark, slow)``, called as
        ``cross_pool(reqs, pool, ahead, block_size, mark, slow)``; where that returns False (the
        pool has duplicate keys or is observed), the caller calls :meth:`cross_boundary`
        (fast-forward's quiet steps)."""
        if not self._crosses:
            return None
        return (cross_pool, self.pool, self.block_size, UNPUBLISHED if self.lazy_unique else None,
                self.register_full_blocks)

    def append_blocks(self, steps: list[list[Request]], n: int) -> None:
        if not self.plain_methods:  # the same pops, through append_block (a subclass's override)
            for g in steps:
                self.append_block(g)
            return
        new, g = self.pool.get_new_blocks(n), steps[0]
        if steps.count(g) == len(steps):  # one bucket of k: request i takes new[i], new[i + k], ...
            # (buckets are disjoint and not empty: one equals g only if it is g)
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

    # ---- memory -------------------------------------------------------------------------------
    def breakdown(self, live: Iterable[Request], computed_tokens: int,
                  *, waiting: Request | None = None) -> MemoryBreakdown:
        """Held blocks hold ``computed_tokens`` token states; the rest of them is internal
        fragmentation; the null block is external (any free block serves ``waiting``). With ``exact_fill`` (fork mode, where a
        shared block may be partial) a block's token states are the most any holder has in it.
        """
        if self.exact_fill:
            return self._exact_breakdown(live)
        pool = self.pool
        return _breakdown(self._lin.split(pool.free_queue.size, pool.shared_excess, computed_tokens))

    def linear_breakdown(self) -> LinearBreakdown | None:
        """:meth:`breakdown`'s constants (fork mode's exact fill is not linear)."""
        return None if self.exact_fill else self._lin

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
        return _breakdown((tok, 0, used * B - tok, self._lin.null_slots, free * B))
