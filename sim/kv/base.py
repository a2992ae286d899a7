"""The allocator contract: what the scheduler, the step kernel and the plots may ask of a KV pool.

Two allocators implement it -- :class:`~sim.kv.paged.PagedAllocator` (vLLM's block pool with a
prefix cache) and :class:`~sim.kv.slab.SlabAllocator` (one contiguous chunk per request, the
paper's Orca baselines). Both count capacity in *blocks* of ``block_size`` token slots; a slab
is a pool of 1-slot blocks that it hands out in contiguous runs::

    paged (B = 4)   [r0 ][r1 ][r0 ][ . ][r2 ][ . ]     any free block serves any request
    slab  (B = 1)   [r0 r0 r0 r0 r0 . . . r1 r1 . .]   a request needs one run of free slots

The allocator is mechanism. It answers "how many free blocks would this take" and does what it
is told; *whether* to admit, preempt or resume (watermark, full-prompt reservation, victim
choice) is decided in :mod:`sim.sched`. Each allocator keeps its per-request state in one
handle, ``Request.kv`` (a :class:`~sim.kv.block_table.BlockTable` or a
:class:`~sim.kv.slab.Chunk`), so a request carries no allocator fields of its own.

A coordinator over several KV-cache groups (full attention + sliding window sharing one block
pool, as vLLM's ``KVCacheCoordinator``) implements the same Protocol: its handle holds one
table per group and its answers sum over the groups.

Capabilities that not every pool has are small objects on it, None where absent, so callers
ask instead of testing the class: ``sharing`` (fork + copy-on-write, :mod:`sim.kv.sharing`),
``layout`` (a physical view for plots, :mod:`sim.kv.layout`), ``connector`` (external KV:
a CPU tier, another instance; :mod:`sim.kv.connector`), ``decode_blocks`` (bulk decode).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from sim.kv.linear import split
from sim.request import Request

if TYPE_CHECKING:
    from sim.kv.connector import KvConnector
    from sim.kv.layout import KvLayout
    from sim.kv.margin import Margin


class Sharing(Protocol):
    """Fork + copy-on-write over block tables (paper-v0's parallel sampling and beam search);
    implemented by :class:`~sim.kv.sharing.ForkSharing`."""

    def blocks(self, req: Request) -> list[int]:
        """The request's block table."""
        ...

    def fork(self, src: Request, dst: Request) -> None:
        """``dst`` shares every block of ``src`` (ref counts + 1)."""
        ...

    def retable(self, moves: list[tuple[Request, list[int]]]) -> None:
        """Give each request its new table (beam re-fork), adjusting ref counts."""
        ...

    def last_block_shared(self, req: Request) -> bool:
        """The block the next token goes to is shared with another request."""
        ...

    def copy_on_write(self, req: Request) -> bool:
        """Copy that last block into a fresh one; False if none is free."""
        ...


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class MemoryBreakdown(NamedTuple):
    """The KV pool in token slots, by what each slot holds; the five fields sum to the pool.

    ``token_state``: K/V of computed tokens. ``reserved``: held for tokens not yet computed
    (a slab's reservation). ``internal_frag``: held but never to be used (a block's unused
    tail, a slab's over-reservation). ``external_frag``: unusable for allocation (the null
    block, buddy rounding, and free slab regions too small for the waiting request: 0 when
    nothing waits). ``free``: allocatable.
    """

    token_state: int
    reserved: int
    internal_frag: int
    external_frag: int
    free: int


class FreeCount(Protocol):
    @property
    def size(self) -> int: ...


class PoolView(Protocol):
    """The two pool counters fast-forward reads on every bulk step (attributes, not calls), and
    the ref counts by block that a step which preempts reads (its victims' freed blocks)."""

    @property
    def free_queue(self) -> FreeCount: ...

    @property
    def shared_excess(self) -> int: ...

    @property
    def ref(self) -> list[int]: ...


class LinearBreakdown(NamedTuple):
    """``breakdown`` with ``free`` free blocks, ``computed`` token states, ``shared`` excess::

        used = usable - free;  internal = (used + shared) * block_size - computed
        token_states = used * block_size - internal;  reserved = 0
        external = null_slots;  free slots = free * block_size
    """

    block_size: int
    usable: int
    null_slots: int

    def split(self, free: int, shared: int, computed: int) -> tuple[int, int, int, int, int]:
        """The five fields of ``breakdown`` (token states, reserved, internal, external, free
        slots), as above (:func:`sim.kv.linear.split`)."""
        return split(self.block_size, self.usable, self.null_slots, free, shared, computed)


class DecodeBlocks(Protocol):
    """What fast-forward asks of a block pool while decoders run in bulk (a paged allocator)."""

    @property
    def pool(self) -> PoolView: ...

    #: nothing but the pool reads the prefix-cache map or its keys (no connector, no KV events,
    #: no fork sharing; sim/kv/paged.py): a run's pops may go ahead of its registrations
    lazy_unique: bool

    def append_block(self, reqs: list[Request]) -> None:
        """Give each request one more block (its last one filled up)."""
        ...

    def append_blocks(self, steps: list[list[Request]], n: int) -> None:
        """:meth:`append_block` for each list in turn, the ``n`` pops as one (the same blocks
        to the same requests, in the same order)."""
        ...

    def register_decoded_blocks(self, reqs: list[Request], ahead: int) -> None:
        """Publish each request's block that decoding just filled (``ahead`` tokens still in
        flight) to the prefix cache."""
        ...

    def cross_boundary(self, reqs: list[Request], ahead: int | None) -> None:
        """:meth:`append_block`, then (``ahead`` not None) :meth:`register_decoded_blocks` with
        ``ahead``: the same blocks, marks and keys, in the same order, in one call."""
        ...

    def cross_call(self) -> tuple[object, ...] | None:
        """:meth:`cross_boundary`'s compiled call and its arguments, for a compiled caller to
        make it itself (None: there is none; sim/kv/paged.py says how it is made)."""
        ...

    def linear_breakdown(self) -> LinearBreakdown | None:
        """The constants of :meth:`KvAllocator.breakdown` when it is linear in the free blocks,
        the token states and the shared excess (a quiet window step computes it inline);
        None: it is not."""
        ...


class KvAllocator(Protocol):
    """A KV pool as the scheduler and the engine see it (see the module docstring)."""

    num_blocks: int        # blocks in the pool, incl. unusable ones (the null block)
    usable_blocks: int     # blocks that can ever be handed out
    enable_caching: bool   # prefix caching on (a slab: never)
    #: True when blocks may be released on any step (sliding-window groups): the scheduler
    #: calls :meth:`allocate` for every running request every step, and no run of steps can
    #: be applied in bulk (no fast-forward).
    allocates_every_step: bool

    @property
    def sharing(self) -> Sharing | None:
        """Fork + copy-on-write of block tables (paper-v0); None: tables cannot be shared by reference."""
        ...

    @property
    def layout(self) -> KvLayout | None:
        """The physical view for plots; None: no single picture (several KV-cache groups)."""
        ...

    @property
    def connector(self) -> KvConnector | None:
        """External KV behind the prefix cache (:meth:`connect`); None: none."""
        ...

    @property
    def headroom(self) -> Margin | None:
        """The slack of every "blocks needed <= free blocks" decision so far
        (:mod:`sim.kv.margin`); None: this pool does not record it."""
        ...

    def connect(self, connector: KvConnector) -> None:
        """Put ``connector`` behind the prefix cache: it hears of every registration
        (``save_blocks``). Raises ValueError where the pool cannot key blocks by content."""
        ...

    def block_keys(self, req: Request, start: int, stop: int) -> list[int]:
        """Content keys of the request's logical blocks ``start..stop`` (the keys they are or
        would be cached under; equal prefixes, equal keys)."""
        ...

    @property
    def decode_blocks(self) -> DecodeBlocks | None:
        """The bulk-decode view for fast-forward; None: requests hold no blocks that grow
        mid-window (a slab reserves its chunk up front)."""
        ...

    @property
    def block_size(self) -> int:
        """Token slots per block (a slab: 1)."""
        ...

    @property
    def paged(self) -> bool:
        """True: attention reads a block table (scattered pages); False: one contiguous chunk."""
        ...

    @property
    def num_free_blocks(self) -> int: ...

    @property
    def evictions(self) -> int:
        """Cached blocks evicted by allocation (prefix cache)."""
        ...

    @property
    def shared_excess(self) -> int:
        """Sum over blocks of max(ref - 1, 0): blocks saved by sharing."""
        ...

    def get_computed_blocks(self, req: Request) -> list[int]:
        """Prefix lookup: cached blocks the request may adopt (none for a slab)."""
        ...

    def blocks_needed(self, req: Request, num_tokens: int, hits: Sequence[int] = ()) -> int:
        """Free blocks that giving ``req`` room for ``num_tokens`` tokens in all would take.

        ``hits`` are prefix-cache blocks adopted with the allocation; the ones sitting in the
        free queue (ref count 0) leave it and are counted.
        """
        ...

    def can_allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                     *, reserve: int = 0) -> int:
        """New blocks to take for ``num_new_tokens`` more tokens, or -1 if fewer than that plus
        ``reserve`` are free."""
        ...

    def allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                 *, reserve: int = 0, cache: bool = True) -> bool:
        """All-or-nothing :meth:`can_allocate` + take; False changes nothing. ``cache=False``
        publishes nothing to the prefix cache yet (blocks an asynchronous load will fill)."""
        ...

    def register_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Publish the request's full blocks up to ``num_tokens`` to the prefix cache."""
        ...

    def free(self, req: Request) -> None:
        """Release everything ``req`` holds."""
        ...

    def num_held_blocks(self, req: Request) -> int:
        """Blocks in the request's table (a slab: slots of its chunk)."""
        ...

    def never_fits(self, req: Request) -> str:
        """Why ``req`` can never be placed even in an empty pool, or ""."""
        ...

    def breakdown(self, live: Iterable[Request], computed_tokens: int,
                  *, waiting: Request | None = None) -> MemoryBreakdown:
        """Memory categories now; ``computed_tokens`` is the live requests' computed total.

        ``waiting`` is the request the scheduler would place next (None: nothing waits); free
        memory it could not use is external fragmentation (a paged pool: none).
        """
        ...

    def check(self, live: Iterable[Request] = ()) -> None:
        """Raise AssertionError if the state is inconsistent with ``live`` holding what it holds."""
        ...
