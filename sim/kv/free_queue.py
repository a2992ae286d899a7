"""The free-block queue: an intrusive doubly linked list over block ids.

vLLM uses a hand-written list rather than a deque because a prefix hit must pull a cached
block out of the *middle* of the queue in O(1). Links live in two flat lists indexed by block
id; ``head``/``tail`` sentinels are the extra ids N and N+1::

    head <-> 3 <-> 4 <-> ... <-> 10 <-> 2 <-> 1 <-> tail
             ^ allocation pops here          appends go here ^

The links are machine integers (``array("q")``), not int objects: writing one touches no
object's reference count. ``ids[b]`` is block ``b``'s own int object, the one a block table
holds. Compiled by Cython from this source where a C compiler is (``free_queue.pxd``: the links
typed as C arrays; ``setup.py``), with the block pool that walks them (:mod:`sim.kv.block_pool`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any


class FreeQueue:
    def __init__(self, num_blocks: int, initial: Iterable[int]) -> None:
        self._head, self._tail = num_blocks, num_blocks + 1
        self._next = array("q", [-1]) * (num_blocks + 2)
        self._prev = array("q", [-1]) * (num_blocks + 2)
        self.ids = list(range(num_blocks + 2))
        self._next[self._head], self._prev[self._tail] = self._tail, self._head
        self.size = 0
        self.append_n(list(initial))

    def pop_n(self, n: int) -> list[int]:
        """Remove and return the last ``n`` blocks, last first (stack order, paper-v0)."""
        prv = self._prev
        out = []
        ids = self.ids
        b = prv[self._tail]
        for _ in range(n):
            out.append(ids[b])
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
        out, b, ids = [], self._next[self._head], self.ids
        while b != self._tail:
            out.append(ids[b])
            b = self._next[b]
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and deep-copied by its links' bytes (compiled, they are C arrays)."""
        return (_restored, (self._head, bytes(self._next), bytes(self._prev), self.size))


def _restored(num_blocks: int, nxt: bytes, prv: bytes, size: int) -> FreeQueue:
    q = FreeQueue(num_blocks, ())
    a, b = array("q"), array("q")
    a.frombytes(nxt)
    b.frombytes(prv)
    q._next, q._prev, q.size = a, b, size
    return q
