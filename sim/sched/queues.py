"""Waiting-queue orderings: which waiting request the scheduler looks at next.

Swappable classes with one surface (``add``, ``peek``, ``pop``, ``prepend``): FCFS is a deque
(a preempted request goes back to the front), priority a heap on ``(priority, arrival, uid)``
(a preempted request simply re-enters by its key). vLLM 0.33 ``--scheduling-policy``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from sim.request import Request


class WaitQueue(Protocol):
    name: str
    # when a request's own allocation preempts itself, keep scanning the running list (priority)
    # or stop the running pass there (FCFS) -- as vLLM's two policies do
    scan_past_self_preemption: bool

    def add(self, req: Request) -> None: ...
    def peek(self) -> Request | None: ...
    def pop(self) -> Request: ...
    def prepend(self, req: Request) -> None: ...
    def remove(self, req: Request) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Request]: ...


class FcfsQueue(deque[Request]):
    """A deque (C ``len``: the queue length is read every step)."""

    name = "fcfs"
    scan_past_self_preemption = False

    add = deque.append
    pop = deque.popleft
    prepend = deque.appendleft

    def peek(self) -> Request | None:
        return self[0] if self else None


class PriorityQueue(list[tuple[int, float, int, Request]]):
    """A binary heap on ``(priority, arrival_s, uid)``: smallest ``priority`` first (vLLM: lower
    value = more important), then arrival, then uid."""

    name = "priority"
    scan_past_self_preemption = True

    def add(self, req: Request) -> None:
        heapq.heappush(self, (req.priority, req.arrival_s, req.uid, req))

    def peek(self) -> Request | None:
        return self[0][3] if self else None

    def pop(self) -> Request:  # type: ignore[override]
        return heapq.heappop(self)[3]

    def prepend(self, req: Request) -> None:
        self.add(req)

    def remove(self, req: Request) -> None:  # type: ignore[override]
        """Take ``req`` out wherever it sits (rare: a preempted request that finished)."""
        i = next(i for i, item in enumerate(list.__iter__(self)) if item[3] is req)
        self[i] = self[-1]
        list.pop(self)
        heapq.heapify(self)

    def __iter__(self) -> Iterator[Request]:  # type: ignore[override]
        return (item[3] for item in list.__iter__(self))


QUEUES: dict[str, type[FcfsQueue] | type[PriorityQueue]] = {"fcfs": FcfsQueue, "priority": PriorityQueue}
