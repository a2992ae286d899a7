"""paper-v0 sharing: fork a block table, copy a shared last block on write, re-fork beams.

A forked sequence shares every block of its parent by reference (ref count + 1). Before a
sequence writes into a shared, partially filled last block it gets a private copy::

    parent  [7][3][12*]        * = last block, partial, ref 2
    child   [7][3][12*]
    child writes token -> copy on write:  child [7][3][5]   (12 back to ref 1)

The vLLM V1 engine has no fork; parallel samples share their prompt through the prefix cache.
"""

from __future__ import annotations

from sim.kv.paged import PagedAllocator, table_of
from sim.request import Request


def fork(kv: PagedAllocator, src: Request, dst: Request) -> None:
    """``dst`` gets a copy of ``src``'s table; every block's ref count + 1."""
    retable(kv, [(dst, list(table_of(src).blocks))])


def retable(kv: PagedAllocator, moves: list[tuple[Request, list[int]]]) -> None:
    """Give each request a new block table (beam re-forks), all at once.

    All new references are taken before any old one is dropped, so a table that is both
    given away and replaced in the same round never sends a block to the free queue.
    """
    for _, blocks in moves:
        kv.pool.touch(blocks)
    for req, blocks in moves:
        if req.kv is not None and req.kv.blocks:
            kv.free(req)
        table_of(req).blocks = blocks


def last_block_shared(kv: PagedAllocator, req: Request) -> bool:
    t = req.kv
    return t is not None and bool(t.blocks) and kv.pool.ref[t.blocks[-1]] > 1


def copy_on_write(kv: PagedAllocator, req: Request) -> bool:
    """Before writing into a shared last block: give ``req`` a private copy. False if no block."""
    blocks = table_of(req).blocks
    last = blocks[-1]
    pool = kv.pool
    if pool.ref[last] <= 1:
        return True
    if pool.free_queue.size < 1:
        return False
    (new,) = pool.get_new_blocks(1)
    pool.ref[last] -= 1
    pool.shared_excess -= 1
    blocks[-1] = new
    return True
