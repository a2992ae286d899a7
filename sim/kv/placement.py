"""Where a contiguous chunk goes in a slab pool: binary buddy (rounded to powers of two) or
first-fit (exact size).

Pool of 15,728 slots (OPT-13B, 12 GiB): not a power of two, so the buddy allocator splits it
into independent trees of its binary components, largest first (our documented assumption)::

    [ 8192 ][ 4096 ][ 2048 ][1024][256][64][32][16]     = 15,728
    a 700-token request -> 1024-slot chunk; 324 slots are buddy rounding (external)
"""

from __future__ import annotations

from typing import Protocol


class Placement(Protocol):
    size: int
    rounds: bool                 # chunks are rounded up (buddy) rather than exact
    live: dict[int, int]         # start -> chunk size

    def alloc(self, n: int) -> int | None: ...
    def release(self, start: int) -> None: ...
    def largest_free(self) -> int: ...
    def total_free(self) -> int: ...
    def free_below(self, n: int) -> int: ...
    def largest_chunk(self) -> int: ...
    def check(self) -> None: ...


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

    def largest_chunk(self) -> int:
        """The largest chunk an empty pool could give (its largest tree)."""
        return max(s for _, s in self.trees)

    def total_free(self) -> int:
        return sum(s * len(b) for s, b in self.free.items())

    def free_below(self, n: int) -> int:
        """Free slots in buddy blocks too small for a chunk of ``n`` slots (rounded up)."""
        return sum(s * len(b) for s, b in self.free.items() if s < n)

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

    def free_below(self, n: int) -> int:
        """Free slots in gaps shorter than ``n``."""
        return sum(g for _, g in self._gaps() if g < n)

    def largest_chunk(self) -> int:
        return self.size

    def check(self) -> None:
        pos = 0
        for st in sorted(self.live):
            assert st >= pos, "first-fit: overlapping chunks"
            pos = st + self.live[st]
        assert pos <= self.size, "first-fit: chunk past the pool end"
