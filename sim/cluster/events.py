"""KV events from a replica's prefix cache: *block stored* / *block removed*, as vLLM publishes
them (``BlockStored`` / ``BlockRemoved``, ``--kv-events-config``) for llm-d's and Dynamo's indexers.

The block pool of a paged allocator keeps its prefix cache as a mapping ``hash key -> block``
(:class:`~sim.kv.block_pool.BlockPool`): a key enters it when a full block is registered and
leaves it when allocation evicts the block. :func:`install` makes that mapping observable --
a ``dict`` whose stores and deletes append ``(stamp, key, stored)`` to a log -- and gives the
allocator the fleet's shared :class:`~sim.kv.hashing.BlockHasher`, so every replica's keys mean
the same content. Lookups stay the plain ``dict`` ones (the hot path is untouched); only stores
and deletes pay a Python call, and only when a stale precise view asks for the log.

The stamp is the replica's ``clock``: the time of the step being planned, also inside a
fast-forward window, so exact and bulk stepping log the same events at the same stamps.

Allocators without such a pool (a slab, prefix caching off) publish no events: the router
sees them as holding nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sim.kv.hashing import BlockHasher

if TYPE_CHECKING:
    from sim.engine.replica import Replica

Event = tuple[float, int, bool]  # (stamp, key, stored)


@dataclass(slots=True, eq=False)
class KvEventLog:
    live: dict[int, int]                       # the pool's prefix cache itself (key -> block)
    events: list[Event] = field(default_factory=list)


class _EventedCache(dict):
    """The pool's ``key -> block`` map, logging stores of new keys and deletes."""

    __slots__ = ("_add", "_clock")

    def __init__(self, data: dict[int, int], add: Callable[[Event], None], clock: Callable[[], float]) -> None:
        super().__init__(data)
        self._add, self._clock = add, clock

    def __setitem__(self, key: int, block: int) -> None:
        if key not in self:  # a duplicate taking over a key is no event: the content stays cached
            self._add((self._clock(), key, True))
        dict.__setitem__(self, key, block)

    def __delitem__(self, key: int) -> None:
        dict.__delitem__(self, key)
        self._add((self._clock(), key, False))


@runtime_checkable
class _CacheMap(Protocol):
    cache: dict[int, int]
    block_hash: list[int | None]


@runtime_checkable
class PrefixCacheHost(Protocol):
    """The capability KV events need: a block pool whose prefix cache is a ``key -> block`` map,
    keyed by a :class:`BlockHasher` (the paged allocator and the hybrid coordinator). Not part of
    the :class:`~sim.kv.base.KvAllocator` contract yet: a ``subscribe(listener)`` there would
    replace this."""

    enable_caching: bool
    hasher: BlockHasher
    lazy_unique: bool  # may keep content-less blocks out of the map (sim/kv/block_pool.py)

    @property
    def pool(self) -> _CacheMap: ...


def install(rep: Replica, hasher: BlockHasher, *, record: bool) -> KvEventLog | None:
    """Share ``hasher`` with ``rep``'s allocator and expose its prefix cache (``record``: log
    events too). Must run before the replica hashes any block. None: no prefix cache."""
    kv = rep.kv
    if not isinstance(kv, PrefixCacheHost) or not kv.enable_caching:
        return None
    pool = kv.pool
    if pool.cache or any(h is not None for h in pool.block_hash):
        raise RuntimeError("KV events installed after the replica cached blocks")
    kv.lazy_unique = False  # the router reads the map: every registered key goes in it
    kv.hasher = hasher
    if not record:
        return KvEventLog(pool.cache)
    log = KvEventLog(pool.cache)
    pool.cache = log.live = _EventedCache({}, log.events.append, lambda: rep.clock)
    return log
