"""Contiguous-slab KV allocator: the vLLM paper's Orca baselines (paper-baselines.md s2).

Each request gets ONE contiguous chunk of token slots, reserved at admission and held until
it finishes. Reservation policy (how many output slots to reserve) is passed in; placement is
a binary buddy allocator (chunks rounded up to a power of two) or first-fit (exact size).

Pool of 15,728 slots (OPT-13B, 12 GiB): not a power of two, so it is split into independent
buddy trees of its binary components, largest first (our documented assumption)::

    [ 8192 ][ 4096 ][ 2048 ][1024][256][64][32][16]     = 15,728
    a 700-token request -> 1024-slot chunk; 324 slots are buddy rounding (external)

Memory categories for a live chunk (paper Fig. 2)::

    |<------------------------- chunk ------------------------->|
    |<---------------- requested --------------->|  rounding    |
    |<- prompt+generated ->|<- reservation ->|int.|  (external) |
       token states           future tokens   never used
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sim.request import Request

Reservation = Callable[[Request, int], int]  # (request, max_model_len) -> reserved output slots


def reserve_max(req: Request, max_len: int) -> int:
    return max_len - req.prompt_tokens


def reserve_pow2(req: Request, max_len: int) -> int:
    return 1 << (req.output_tokens - 1).bit_length()


def reserve_oracle(req: Request, max_len: int) -> int:
    return req.output_tokens


RESERVATIONS: dict[str, Reservation] = {"max": reserve_max, "pow2": reserve_pow2, "oracle": reserve_oracle}


def pow2_ceil(n: int) -> int:
    return 1 << (n - 1).bit_length()


class BuddyPlacement:
    """Binary buddy allocator over a pool decomposed into power-of-two trees."""

    rounds = True

    def __init__(self, size: int) -> None:
        self.size = size
        self.trees: list[tuple[int, int]] = []  # (base, size)
        base = 0
        for bit in range(size.bit_length() - 1, -1, -1):
            if size >> bit & 1:
                self.trees.append((base, 1 << bit))
                base += 1 << bit
        self.free: dict[int, set[int]] = {}
        self.tree_of: dict[int, tuple[int, int]] = {}
        for b, s in self.trees:
            self.free.setdefault(s, set()).add(b)
            self.tree_of[b] = (b, s)
        self.live: dict[int, int] = {}  # start -> size

    def _tree(self, start: int) -> tuple[int, int]:
        for b, s in self.trees:
            if b <= start < b + s:
                return b, s
        raise AssertionError(start)

    def alloc(self, n: int) -> int | None:
        size = pow2_ceil(n)
        cands = [s for s, blocks in self.free.items() if s >= size and blocks]
        if not cands:
            return None
        s = min(cands)
        start = min(self.free[s])
        self.free[s].discard(start)
        while s > size:  # split, keep the low half
            s //= 2
            self.free.setdefault(s, set()).add(start + s)
        self.live[start] = size
        return start

    def release(self, start: int) -> None:
        size = self.live.pop(start)
        base, tsize = self._tree(start)
        while size < tsize:
            buddy = base + ((start - base) ^ size)
            fl = self.free.get(size)
            if not fl or buddy not in fl:
                break
            fl.discard(buddy)
            start = min(start, buddy)
            size *= 2
        self.free.setdefault(size, set()).add(start)

    def largest_free(self) -> int:
        return max((s for s, b in self.free.items() if b), default=0)

    def total_free(self) -> int:
        return sum(s * len(b) for s, b in self.free.items())

    def check(self) -> None:
        spans = sorted([(st, s) for s, bl in self.free.items() for st in bl] + list(self.live.items()))
        pos = 0
        for st, s in spans:
            assert st == pos, f"buddy: gap or overlap at {pos} (next span starts {st})"
            base, _ = self._tree(st)
            assert (st - base) % s == 0, "buddy block misaligned"
            pos += s
        assert pos == self.size, "buddy: slots not conserved"


class FirstFitPlacement:
    """Exact-size chunks placed at the lowest address gap that fits."""

    rounds = False

    def __init__(self, size: int) -> None:
        self.size = size
        self.live: dict[int, int] = {}

    def _gaps(self) -> list[tuple[int, int]]:
        gaps, pos = [], 0
        for st in sorted(self.live):
            if st > pos:
                gaps.append((pos, st - pos))
            pos = st + self.live[st]
        if pos < self.size:
            gaps.append((pos, self.size - pos))
        return gaps

    def alloc(self, n: int) -> int | None:
        for st, g in self._gaps():
            if g >= n:
                self.live[st] = n
                return st
        return None

    def release(self, start: int) -> None:
        del self.live[start]

    def largest_free(self) -> int:
        return max((g for _, g in self._gaps()), default=0)

    def total_free(self) -> int:
        return self.size - sum(self.live.values())

    def check(self) -> None:
        pos = 0
        for st in sorted(self.live):
            assert st >= pos, "first-fit: overlapping chunks"
            pos = st + self.live[st]
        assert pos <= self.size, "first-fit: chunk past the pool end"


class SlabAllocator:
    """One contiguous chunk per request, reserved at admission (Orca)."""

    kind = "slab"

    def __init__(self, pool_slots: int, max_model_len: int, reservation: str = "max",
                 placement: str = "buddy") -> None:
        self.pool_slots = pool_slots
        self.max_model_len = max_model_len
        self.reserve = RESERVATIONS[reservation]
        self.placement: BuddyPlacement | FirstFitPlacement = (
            BuddyPlacement(pool_slots) if placement == "buddy" else FirstFitPlacement(pool_slots))

    def requested_slots(self, req: Request) -> int:
        return min(req.prompt_tokens + self.reserve(req, self.max_model_len), self.max_model_len)

    def chunk_slots(self, req: Request) -> int:
        n = self.requested_slots(req)
        return pow2_ceil(n) if self.placement.rounds else n

    def can_ever_fit(self, req: Request) -> bool:
        if self.placement.rounds:
            return self.chunk_slots(req) <= max(s for _, s in self.placement.trees)  # type: ignore[union-attr]
        return self.chunk_slots(req) <= self.pool_slots

    def admit(self, req: Request) -> bool:
        n = self.requested_slots(req)
        start = self.placement.alloc(n)
        if start is None:
            return False
        req.chunk_start, req.requested_slots = start, n
        req.chunk_size = self.placement.live[start]
        return True

    def free(self, req: Request) -> None:
        if req.chunk_start >= 0:
            self.placement.release(req.chunk_start)
        req.chunk_start, req.chunk_size, req.requested_slots = -1, 0, 0

    def breakdown(self, live: Iterable[Request]) -> tuple[int, int, int, int, int]:
        """(token_state, reserved, internal_frag, external_frag, free) slots; sums to the pool."""
        tok = res = internal = rounding = 0
        for r in live:
            done = r.num_computed_tokens
            tok += done
            res += r.final_tokens - done
            internal += r.requested_slots - r.final_tokens
            rounding += r.chunk_size - r.requested_slots
        largest = self.placement.largest_free()
        holes = self.placement.total_free() - largest
        return tok, res, internal, rounding + holes, largest

    def check(self, live: Iterable[Request] = ()) -> None:
        self.placement.check()
        starts = {r.chunk_start for r in live if r.chunk_start >= 0}
        assert starts == set(self.placement.live), "live chunks != requests holding chunks"

    # ---- the scheduler-facing surface shared with PagedAllocator ----------------------------
    block_size = 0
    evictions = 0
    shared_excess = 0
    num_free_blocks = 0  # no blocks: the steps table's free_blocks column is paged-only

    def get_computed_blocks(self, req: Request) -> list[int]:
        return []  # no prefix sharing between contiguous chunks

    def allocate_slots(self, req: Request, num_new_tokens: int, hit_blocks: object = (), *,
                       full_sequence_must_fit: bool = False, apply_watermark: bool = False) -> bool:
        """The chunk is reserved once, at admission; later steps always fit inside it."""
        return True if req.chunk_start >= 0 else self.admit(req)
