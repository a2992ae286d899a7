"""paper-v0 sharing: fork a block table, copy a shared last block on write, re-fork beams.

A forked sequence shares every block of its parent by reference (ref count + 1). Before a
sequence writes into a shared, partially filled last block it gets a private copy::

    parent  [7][3][12*]        * = last block, partial, ref 2
    child   [7][3][12*]
    child writes token -> copy on write:  child [7][3][5]   (12 back to ref 1)

The vLLM V1 engine has no fork; parallel samples share their prompt through the prefix cache.
:class:`ForkSharing` is the capability an allocator offers for it (``KvAllocator.sharing``;
None where tables cannot be shared by reference: a slab, several KV-cache groups).
"""

from __future__ import annotations

from typing import Protocol

from sim.kv.block_pool import BlockPool
from sim.kv.block_table import table_of
from sim.request import Request


class _Pool(Protocol):
    @property
    def pool(self) -> BlockPool: ...

    def free(self, req: Request) -> None: ...


class ForkSharing:
    """Fork and copy-on-write over one block pool (one KV-cache group)."""

    __slots__ = ("kv",)

    def __init__(self, kv: _Pool) -> None:
        self.kv = kv

    def blocks(self, req: Request) -> list[int]:
        """A copy of ``req``'s block table."""
        return list(table_of(req).blocks)

    def fork(self, src: Request, dst: Request) -> None:
        """``dst`` gets a copy of ``src``'s table; every block's ref count + 1."""
        self.retable([(dst, self.blocks(src))])

    def retable(self, moves: list[tuple[Request, list[int]]]) -> None:
        """Give each request a new block table (beam re-forks), all at once.

        All new references are taken before any old one is dropped, so a table that is both
        given away and replaced in the same round never sends a block to the free queue.
        """
        kv = self.kv
        for _, blocks in moves:
            kv.pool.touch(blocks)
        for req, blocks in moves:
            if req.kv is not None and req.kv.blocks:
                kv.free(req)
            table_of(req).blocks = blocks

    def last_block_shared(self, req: Request) -> bool:
        t = req.kv
        return t is not None and bool(t.blocks) and self.kv.pool.ref[t.blocks[-1]] > 1

    def copy_on_write(self, req: Request) -> bool:
        """Before writing into a shared last block: give ``req`` a private copy. False if no block."""
        blocks = table_of(req).blocks
        last = blocks[-1]
        pool = self.kv.pool
        if pool.ref[last] <= 1:
            return True
        if pool.free_queue.size < 1:
            return False
        (new,) = pool.get_new_blocks(1)
        pool.ref[last] -= 1
        pool.shared_excess -= 1
        blocks[-1] = new
        return True
