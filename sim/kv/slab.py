"""Contiguous-slab KV allocator: the vLLM paper's Orca baselines (paper-baselines.md s2).

Each request gets ONE contiguous chunk of token slots, reserved at admission and held until
it finishes. The reservation policy (how many output slots to reserve) is passed in;
placement is a binary buddy allocator or first-fit (:mod:`sim.kv.placement`). In the
:class:`~sim.kv.base.KvAllocator` contract a slab is a pool of 1-slot blocks.

Memory categories for a live chunk (paper Fig. 2)::

    |<------------------------- chunk ------------------------->|
    |<---------------- requested --------------->|  rounding    |
    |<- prompt+generated ->|<- reservation ->|int.|  (external) |
       token states           future tokens   never used

External fragmentation in the free space is defined as the vLLM paper means it: free memory
that cannot be used *for the request that is waiting*. A free region smaller than the chunk
the head of the waiting queue needs is a hole; regions it fits in are free; when nothing
waits, every free slot is free (an idle pool has no fragmentation)::

    pool   [ r0 r0 r0 | . . | r1 r1 | . . . . . . . . | r2 | . . . ]
                       2 free          8 free                3 free
    head needs 4  ->   hole            free                  hole      external 5, free 8
    head needs 9  ->   hole            hole                  hole      external 13, free 0
    no head       ->   free            free                  free      external 0, free 13
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sim.kv.base import MemoryBreakdown
from sim.kv.connector import KvConnector
from sim.kv.layout import SlabLayout
from sim.kv.placement import BuddyPlacement, FirstFitPlacement, Placement, pow2_ceil
from sim.request import Request

Reservation = Callable[[Request, int], int]  # (request, max_model_len) -> reserved output slots


def reserve_max(req: Request, max_len: int) -> int:
    return max_len - req.prompt_tokens


def reserve_pow2(req: Request, max_len: int) -> int:
    return 1 << (req.output_tokens - 1).bit_length()


def reserve_oracle(req: Request, max_len: int) -> int:
    return req.output_tokens


RESERVATIONS: dict[str, Reservation] = {"max": reserve_max, "pow2": reserve_pow2, "oracle": reserve_oracle}


@dataclass(slots=True, frozen=True)
class Chunk:
    """A request's slab handle (``Request.kv``): where its chunk starts and how big it is."""

    start: int
    size: int        # slots placed (rounded up for buddy)
    requested: int   # slots the reservation asked for


class SlabAllocator:
    """One contiguous chunk per request, reserved at admission (Orca)."""

    paged = False
    enable_caching = False
    allocates_every_step = False
    decode_blocks = None  # a chunk is reserved up front: nothing to hand out mid-window
    block_size = 1
    evictions = 0
    shared_excess = 0
    sharing = None       # chunks are private
    connector = None     # no prefix cache to put external KV behind

    def __init__(self, pool_slots: int, max_model_len: int, reservation: str = "max",
                 placement: str = "buddy") -> None:
        self.pool_slots = self.num_blocks = self.usable_blocks = pool_slots
        self.max_model_len = max_model_len
        self.reserve = RESERVATIONS[reservation]
        self.placement: Placement = (
            BuddyPlacement(pool_slots) if placement == "buddy" else FirstFitPlacement(pool_slots))
        # running totals over live chunks, so a breakdown is O(1)
        self._final = self._requested = self._chunk = 0
        self.layout = SlabLayout(self)
        self.headroom = None  # a slab's fits are by slot ranges, not counts: not recorded

    def connect(self, connector: KvConnector) -> None:
        raise ValueError("a slab has no prefix cache: a KV connector needs --allocator paged")

    def block_keys(self, req: Request, start: int, stop: int) -> list[int]:
        raise ValueError("a slab keys no blocks by content")

    # ---- sizes --------------------------------------------------------------------------------
    def requested_slots(self, req: Request) -> int:
        return min(req.prompt_tokens + self.reserve(req, self.max_model_len), self.max_model_len)

    def chunk_slots(self, req: Request) -> int:
        n = self.requested_slots(req)
        return pow2_ceil(n) if self.placement.rounds else n

    @property
    def num_free_blocks(self) -> int:
        return self.placement.total_free()

    def num_held_blocks(self, req: Request) -> int:
        return 0 if req.kv is None else req.kv.size

    def never_fits(self, req: Request) -> str:
        if self.chunk_slots(req) <= self.placement.largest_chunk():
            return ""
        return f"chunk of {self.chunk_slots(req)} slots > largest contiguous region of the KV pool"

    # ---- the allocator contract ----------------------------------------------------------------
    def get_computed_blocks(self, req: Request) -> list[int]:
        return []  # no prefix sharing between contiguous chunks

    def register_full_blocks(self, req: Request, num_tokens: int) -> None:
        return None

    def blocks_needed(self, req: Request, num_tokens: int, hits: Sequence[int] = ()) -> int:
        """The whole chunk, once; later steps write inside it."""
        return 0 if req.kv is not None else self.chunk_slots(req)

    def can_allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                     *, reserve: int = 0) -> int:
        """The chunk must fit in one free region; ``reserve`` does not apply (whole chunks)."""
        if req.kv is not None:
            return 0
        n = self.chunk_slots(req)
        return n if n <= self.placement.largest_free() else -1

    def allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                 *, reserve: int = 0, cache: bool = True) -> bool:
        """The chunk is reserved once, at admission; later steps always fit inside it."""
        if req.kv is not None:
            return True
        n = self.requested_slots(req)
        start = self.placement.alloc(n)
        if start is None:
            return False
        chunk = req.kv = Chunk(start, self.placement.live[start], n)
        self._final += req.final_tokens
        self._requested += n
        self._chunk += chunk.size
        return True

    def free(self, req: Request) -> None:
        chunk = req.kv
        if chunk is None:
            return
        self.placement.release(chunk.start)
        self._final -= req.final_tokens
        self._requested -= chunk.requested
        self._chunk -= chunk.size
        req.kv = None

    # ---- memory -------------------------------------------------------------------------------
    def breakdown(self, live: Iterable[Request], computed_tokens: int,
                  *, waiting: Request | None = None) -> MemoryBreakdown:
        """(token_state, reserved, internal_frag, external_frag, free) slots; sums to the pool.

        External: buddy rounding of live chunks plus the free regions too small for the chunk
        ``waiting`` needs (the module docstring's picture); 0 holes when nothing waits.
        """
        tok = computed_tokens
        free = self.placement.total_free()
        holes = 0
        if waiting is not None and waiting.kv is None:
            holes = self.placement.free_below(self.chunk_slots(waiting))
        return MemoryBreakdown(tok, self._final - tok, self._requested - self._final,
                               self._chunk - self._requested + holes, free - holes)

    def check(self, live: Iterable[Request] = ()) -> None:
        self.placement.check()
        chunks = [r for r in live if r.kv is not None]
        assert {r.kv.start for r in chunks} == set(self.placement.live), \
            "live chunks != requests holding chunks"
        assert self._chunk == sum(self.placement.live.values()), "chunk total drift"
        assert self._requested == sum(r.kv.requested for r in chunks), "requested total drift"
