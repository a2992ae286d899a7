"""A replica's loop as SimPy runs it, with what it caches for readers cleared as it runs.

A router reads every replica's outstanding tokens at every arrival (32 reads an arrival on a
32-replica fleet), while most replicas sleep through most arrivals: their requests' counts do
not move then. The requests' part of the sum is cached between the loop's resumptions, so it
is recomputed once a resumption instead of once a read (:attr:`Replica.outstanding_tokens`)::

    loop:    runs ......... yield ~~~~~~~~~~~~~~~~~~~~~~~~~~~~ resumes ... runs ... yield
    cache:   cleared        (router reads: computed once, then served)   cleared

The cache is cleared both when the loop resumes and when it yields, so a read made by the loop
itself is never served after the loop changed its requests. Only the loop (and ``submit``, which
clears it too) changes a lazily read replica's requests; the counts the loop keeps virtual are
corrected outside the cache (``StepKernel.virtual_at`` / ``virtual_tokens``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol


class Cached(Protocol):
    _ot: int | None  # the requests' outstanding tokens, None: not computed since the loop last ran


def clearing(owner: Cached, loop: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """``loop``, yielding what it yields, with ``owner._ot`` cleared around each of its runs."""
    send, throw = loop.send, loop.throw
    value: Any = None
    exc: BaseException | None = None
    while True:
        owner._ot = None
        try:
            ev = send(value) if exc is None else throw(exc)
        except StopIteration as stop:
            return stop.value
        owner._ot = None
        try:
            value, exc = (yield ev), None
        except Exception as e:  # a failed event: SimPy throws its exception into the process
            value, exc = None, e
