"""The free-block queue: an intrusive doubly linked list over block ids.

vLLM uses a hand-written list rather than a deque because a prefix hit must pull a cached
block out of the *middle* of the queue in O(1). Links live in two flat lists indexed by block
id; ``head``/``tail`` sentinels are the extra ids N and N+1::

    head <-> 3 <-> 4 <-> ... <-> 10 <-> 2 <-> 1 <-> tail
             ^ allocation pops here          appends go here ^

Compiled by Cython from this source where a C compiler is (``free_queue.pxd``, ``setup.py``),
with the block pool that walks its links (:mod:`sim.kv.block_pool`).
"""

from __future__ import annotations

from collections.abc import Iterable


class FreeQueue:
    def __init__(self, num_blocks: int, initial: Iterable[int]) -> None:
        self._head, self._tail = num_blocks, num_blocks + 1
        self._next = [-1] * (num_blocks + 2)
        self._prev = [-1] * (num_blocks + 2)
        self._next[self._head], self._prev[self._tail] = self._tail, self._head
        self.size = 0
        self.append_n(list(initial))

    def pop_n(self, n: int) -> list[int]:
        """Remove and return the last ``n`` blocks, last first (stack order, paper-v0)."""
        prv = self._prev
        out = []
        b = prv[self._tail]
        for _ in range(n):
            out.append(b)
            b = prv[b]
        prv[self._tail] = b
        self._next[b] = self._tail
        self.size -= n
        return out

    def remove(self, b: int) -> None:
        nxt, prv = self._next, self._prev
        i = b  # (an index: compiled, the id converted once)
        p, n = prv[i], nxt[i]
        nxt[p], prv[n] = n, p
        self.size -= 1

    def append_n(self, blocks: list[int]) -> None:
        """Add at the tail, keeping the given order."""
        if not blocks:
            return
        nxt, prv = self._next, self._prev
        last = prv[self._tail]
        for b in blocks:
            nxt[last], prv[b] = b, last
            last = b
        nxt[last], prv[self._tail] = self._tail, last
        self.size += len(blocks)

    def prepend_n(self, blocks: list[int]) -> None:
        """Add at the front, keeping the given order (the first element becomes the head)."""
        if not blocks:
            return
        nxt, prv = self._next, self._prev
        first = nxt[self._head]
        for b in reversed(blocks):
            nxt[b], prv[first] = first, b
            first = b
        nxt[self._head], prv[first] = first, self._head
        self.size += len(blocks)

    def to_list(self) -> list[int]:
        out, b = [], self._next[self._head]
        while b != self._tail:
            out.append(b)
            b = self._next[b]
        return out
