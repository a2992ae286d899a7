"""The paged allocator's per-request block loops (:class:`~sim.kv.paged.PagedAllocator`).

In a fast-forward window, every step where decoders cross a block boundary gives each of them
one new block and (with prefix caching) marks the block its last token filled; an admission
takes and marks its prompt's blocks. On a busy replica that is a few hundred thousand requests
or blocks touched a second, so these loops are compiled by Cython from this source where a C
compiler is (``table_loops.pxd`` types their counts and indices; ``setup.py``), and run as they
are where not: one implementation either way.

Block ids stay the lists' own int objects; where a loop writes ``i = b``, ``i`` is the id as a
C index (converted once). The prefix-cache map is read and written through its own protocol
(``get``, ``in``, item assignment, ``del``): a map that logs what enters or leaves it (KV
events, a dict subclass) sees every change.

:func:`cross_pool` (a block boundary on a pool, its counts kept) is :meth:`PagedAllocator.cross_boundary`'s
one call, and :meth:`PagedAllocator.cross_call`'s, made by a compiled caller (fast-forward's quiet
steps): the bookkeeping around the pops is written once, here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sim.kv.block_pool import UNPUBLISHED, BlockPool, pop_front
from sim.kv.block_table import BlockTable
from sim.kv.margin import Margin
from sim.request import Request


def append_each(reqs: list[Request], blocks: list[int]) -> None:
    """``reqs[i].kv.blocks.append(blocks[i])`` for each ``i`` (one block for each request)."""
    n = len(reqs)
    if len(blocks) != n:
        raise ValueError("append_each: one block for each request")
    for k in range(n):
        r = reqs[k]
        r.kv.blocks.append(blocks[k])


def _each_decoder(reqs: list[Request], new: list[int] | None, ahead: int, block_size: int,
                  bh: list[Any], mark: object, slow: Callable[[Request, int], None]) -> None:
    """For each request ``r`` in order: ``new[k]`` appended to its table (``new`` given: a
    crossing), then, with ``upto = r.num_computed_tokens + ahead``, its filled block marked where
    that is all registration does (no content, ``mark`` given, the one block past the registered
    ones, unhashed), else ``slow(r, upto)`` (the allocator's own registration, in its place in
    the order). Appending and registering request by request leaves what appending to every
    table first would: a registration reads only its own request's table and the map."""
    if block_size <= 0:
        raise ValueError("register_decoded: block_size must be positive")
    n = len(reqs)
    for k in range(n):
        r = reqs[k]
        table = r.kv
        blocks = table.blocks
        if new is not None:
            blocks.append(new[k])
        c = r.num_computed_tokens
        upto = c + ahead
        if mark is not None and r.content is None:
            j = table.num_registered
            if upto // block_size == j + 1:
                b = blocks[j]
                i = b  # (an index: compiled, the id converted once)
                if bh[i] is None:
                    bh[i] = mark
                    table.num_registered = j + 1
                    continue
        slow(r, upto)
        if len(reqs) != n:
            raise RuntimeError("register_decoded: the request list changed")


def register_decoded(reqs: list[Request], ahead: int, block_size: int, bh: list[Any], mark: object,
                     slow: Callable[[Request, int], None]) -> None:
    """:meth:`~sim.kv.paged_prefix.PrefixRegistration.register_decoded_blocks`' loop: each
    request's filled block marked (``mark``: ``UNPUBLISHED``, or None where keys go in the map
    at once), or ``slow(r, upto)``."""
    _each_decoder(reqs, None, ahead, block_size, bh, mark, slow)


def cross_pool(reqs: list[Request], pool: BlockPool, ahead: int | None, block_size: int, mark: object,
               slow: Callable[[Request, int], None]) -> bool:
    """A window step's block boundary (:meth:`PagedAllocator.cross_boundary`'s one call, which
    fast-forward's quiet steps make themselves: ``cross_call``): one block for each request
    popped from the free queue's front (:func:`~sim.kv.block_pool.pop_front`), appended, then,
    unless ``ahead`` is None, registered as :func:`register_decoded` does; the queue's size and
    the evictions kept. False, with nothing done, where the pool has duplicate keys or is
    observed: then its methods must run."""
    if pool.dups or pool.observed:
        return False
    fq = pool.free_queue
    new: list[int] = []
    bh = pool.block_hash
    evicted = pop_front(new, fq._next, fq._prev, fq._head, fq.ids, pool.ref, bh, pool.cache, len(reqs), UNPUBLISHED)
    if ahead is None:
        append_each(reqs, new)
    else:
        _each_decoder(reqs, new, ahead, block_size, bh, mark, slow)
    fq.size -= len(reqs)
    pool.evictions += evicted
    return True


def mark_full(bh: list[Any], table: BlockTable, full: int) -> None:
    """Registration of a table's first ``full`` blocks where its request has no content and its
    blocks wait unpublished (``lazy_unique``): the new ones are marked, not keyed; a hit keeps
    its key."""
    j0 = table.num_registered
    if full <= j0:
        return
    table.num_registered = full
    blocks = table.blocks
    end = len(blocks) if full > len(blocks) else full
    for j in range(j0, end):
        b = blocks[j]
        i = b  # (an index: compiled, the id converted once)
        if bh[i] is None:
            bh[i] = UNPUBLISHED


def new_blocks(req: Request, slots: int, nhit: int, block_size: int) -> int:
    """Blocks ``req`` must be given to hold ``slots`` token slots with ``nhit`` hits adopted: the
    one count behind :meth:`PagedAllocator.blocks_needed` and :func:`can_take`."""
    t = req.kv
    need = -(-slots // block_size) - (0 if t is None else len(t.blocks)) - nhit  # cdiv, less what it holds
    return need if need > 0 else 0


def can_take(pool: BlockPool, margin: Margin, block_size: int, req: Request, n: int, hits: Sequence[int],
             reserve: int) -> int:
    """:meth:`PagedAllocator.can_allocate`: new blocks for ``n`` more tokens, or -1 if they are
    not free (the slack noted in ``margin``). Hits whose ref count is 0 sit in the free queue
    and count against capacity (s2 rule 1)."""
    nhit = len(hits)
    need = new_blocks(req, req.num_computed_tokens + nhit * block_size + n, nhit, block_size)
    hit_free = pool.num_free_among(hits) if nhit else 0
    if not margin.note(pool.free_queue.size - need - hit_free - reserve):
        return -1
    return need


def grow(pool: BlockPool, margin: Margin, block_size: int, req: Request, n: int, reserve: int) -> bool:
    """:meth:`PagedAllocator.allocate` of ``n`` more tokens without hits, for a request without
    content whose blocks wait unpublished, in one call: :func:`can_take`, the table (created on
    first use), the pool's new blocks, :func:`mark_full`. False: not free, nothing changed."""
    need = can_take(pool, margin, block_size, req, n, (), reserve)
    if need < 0:
        return False
    table = req.kv
    if table is None:
        table = req.kv = BlockTable()
    if need:
        table.blocks.extend(pool.get_new_blocks(need))
    upto = req.num_computed_tokens + n
    tokens = req.num_tokens
    if tokens < upto:
        upto = tokens
    mark_full(pool.block_hash, table, upto // block_size)
    return True


def lookup_unique(cache: dict[int, int], u0: int, n: int) -> list[int]:
    """``cache[u0 - j]`` for ``j = 0, 1, ...`` while the key is in the map, at most ``n``: a
    request without content probing its own blocks from before a preemption."""
    hits: list[int] = []
    get = cache.get  # (the map's own: a subclass's, where it has one)
    for j in range(n):
        b = get(u0 - j)
        if b is None:
            break
        hits.append(b)
    return hits


def publish(pool: BlockPool, blocks: list[int], n: int, u0: int) -> None:
    """A preempted request's marked blocks among its first ``n`` enter the map under ``u0 - j``,
    in table order (:meth:`BlockPool.cache_block`), for its probe when it comes back."""
    bh = pool.block_hash
    end = len(blocks) if n > len(blocks) else n
    for j in range(end):
        b = blocks[j]
        i = b  # (an index: compiled, the id converted once)
        if bh[i] is UNPUBLISHED:
            pool.cache_block(b, u0 - j)
