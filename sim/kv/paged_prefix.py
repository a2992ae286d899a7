"""The paged allocator's prefix cache: which of a request's blocks enter the map, and when.

A full block is registered when the tokens that fill it are scheduled: a block of shared prompt
content under its content key (:class:`~sim.kv.hashing.BlockHasher`), any other under the
request's arithmetic unique key ``unique_key(uid, j)``. A request without content only marks
its blocks (``UNPUBLISHED``: :mod:`sim.kv.block_pool`) and publishes them if it is freed before
it finishes (a preemption), so that its own probe finds them when it comes back::

    admitted     blocks  [ 7 | 3 | 12 | 5 ]     block_hash  U  U  U  None   (U: marked; 5 partial)
    preempted    map     {u0: 7, u0-1: 3, u0-2: 12}                        (published, in table order)
    re-admitted  probe   u0, u0-1, u0-2 -> hits [7, 3, 12]                  (if none was evicted)

The per-block and per-request loops are :mod:`sim.kv.table_loops`' (compiled by Cython where
a C compiler is). Like the rest, they read and write the map through its own protocol, so a map
that logs what enters or leaves it (KV events) sees every change.
"""

from __future__ import annotations

from sim.kv.block_pool import UNPUBLISHED, BlockPool
from sim.kv.block_table import BlockTable, table_of
from sim.kv.hashing import UNIQUE_BASE, BlockHasher, shared_prefix_blocks, unique_key
from sim.kv.table_loops import lookup_unique, mark_full, publish, register_decoded
from sim.request import Request


class PrefixRegistration:
    """Prefix-cache registration for :class:`~sim.kv.paged.PagedAllocator` (a mixin: it reads
    the allocator's pool, block size, hasher and ``lazy_unique``)."""

    pool: BlockPool
    block_size: int
    enable_caching: bool
    hasher: BlockHasher
    lazy_unique: bool
    def get_computed_blocks(self, req: Request) -> list[int]:
        """Longest cached prefix, capped at ``num_tokens - 1`` and counted in whole blocks."""
        if not self.enable_caching:
            return []
        hits: list[int] = []
        cache = self.pool.cache
        n = (req.num_tokens - 1) // self.block_size
        if req.content is None:  # every key is arithmetic: unique_key(uid, j) == u0 - j
            if req.kv is None:  # never given blocks here: none of its keys entered this map
                return hits
            return lookup_unique(cache, unique_key(req.uid, 0), n)
        hashes = table_of(req).hashes
        if len(hashes) < n:  # the chain up to the cap, in one call (the hashes are needed anyway)
            self.hasher.extend(req, hashes, n)
        for j in range(n):
            b = cache.get(hashes[j])
            if b is None:
                break
            hits.append(b)
        return hits

    def register_decoded_blocks(self, reqs: list[Request], ahead: int) -> None:
        """:meth:`register_full_blocks` up to ``num_computed_tokens + ahead`` for each request
        (fast-forward: decoders whose last block fills this step; one call per step)."""
        register_decoded(reqs, ahead, self.block_size, self.pool.block_hash, UNPUBLISHED if self.lazy_unique else None,
                         self.register_full_blocks)

    def register_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Publish the blocks that ``num_tokens`` tokens fill to the prefix cache (schedule time).

        Blocks past the shared prompt content are unique to the request: their key is
        arithmetic (no hashing, never shared with another request). A request without content
        only marks its blocks (``lazy_unique``; they enter the map in :meth:`free`).
        """
        table = req.kv
        full = num_tokens // self.block_size
        if req.content is None and self.lazy_unique:  # hits keep their keys; new blocks wait
            mark_full(self.pool.block_hash, table, full)
            return
        j0 = table.num_registered
        if full <= j0:
            return
        table.num_registered = full
        if full == j0 + 1 and req.content is None:  # one unique block: the decode hot path
            b = table.blocks[j0]
            if self.pool.block_hash[b] is None:  # (a duplicate: its own block from before a preemption)
                self.pool.cache_block(b, -(req.uid * UNIQUE_BASE + j0 + 1))  # unique_key(uid, j0)
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
        end = min(full, shared_prefix_blocks(req, self.block_size))  # blocks with content keys
        hashes = table.hashes
        if len(hashes) < end:  # the content keys, computed in one loop
            self.hasher.extend(req, hashes, end)
        keys = hashes[j0:end]  # (empty when j0 >= end)
        if full > end:  # past the content: unique keys
            keys.extend(range(unique0 - max(j0, end), unique0 - full, -1))
        pool.cache_unhashed(blocks[j0:full], keys)

    def _publish(self, req: Request, table: BlockTable) -> None:
        """Enter the request's unpublished blocks in the map under their keys, in table order."""
        publish(self.pool, table.blocks, table.num_registered, unique_key(req.uid, 0))
