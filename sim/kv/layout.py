"""Physical layout views of a KV pool, for pictures of it (``kvsim plot memmap``).

An allocator offers one as ``KvAllocator.layout`` (None when no single picture exists: several
KV-cache groups share the pool). A view reads the allocator's state; it changes nothing::

    PagedLayout  unit = a block of B slots   ref count, prefix-cached?, each request's table
    SlabLayout   unit = one token slot       each request's chunk (start, requested, placed)
"""

from __future__ import annotations

from typing import Literal, Protocol

from sim.kv.block_pool import BlockPool
from sim.request import Request


class _Pool(Protocol):
    num_blocks: int

    @property
    def block_size(self) -> int: ...


class _Paged(_Pool, Protocol):
    pool: BlockPool


class PagedLayout:
    """Blocks of one block pool (one KV-cache group)."""

    kind: Literal["paged"] = "paged"
    __slots__ = ("kv",)

    def __init__(self, kv: _Paged) -> None:
        self.kv = kv

    @property
    def num_units(self) -> int:
        return self.kv.num_blocks

    @property
    def unit_tokens(self) -> int:
        return self.kv.block_size

    @property
    def null_block(self) -> int:
        """The reserved null block's id (-1: none)."""
        return self.kv.pool.null_block

    def ref(self, b: int) -> int:
        return self.kv.pool.ref[b]

    def cached(self, b: int) -> bool:
        """Block ``b`` carries a prefix-cache hash."""
        return self.kv.pool.block_hash[b] is not None

    def table(self, req: Request) -> list[int]:
        t = req.kv
        return [] if t is None else list(t.blocks)


class SlabLayout:
    """Token slots of a slab pool."""

    kind: Literal["slab"] = "slab"
    unit_tokens = 1
    __slots__ = ("kv",)

    def __init__(self, kv: _Pool) -> None:
        self.kv = kv

    @property
    def num_units(self) -> int:
        return self.kv.num_blocks

    def chunk(self, req: Request) -> tuple[int, int, int] | None:
        """(first slot, slots requested, slots placed) of ``req``'s chunk, or None."""
        c = req.kv
        return None if c is None else (c.start, c.requested, c.size)


KvLayout = PagedLayout | SlabLayout
