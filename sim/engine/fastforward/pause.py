"""A window that waits for the router instead of ending (live routing).

A live router reads every replica at each arrival instant ``t``. A fast-forward window that
reaches a step straddling ``t`` used to end there: the decoders got their real token counts
(:func:`~sim.engine.fastforward.handover.hand_over`), SimPy ran the step exactly, and a new
window started -- for every replica, at every arrival, although only one replica receives the
request. A *pausable* window (:func:`pause`) instead stops where the exact loop would be at
``t`` (sync: step ``s + 1`` planned, not landed; async: step ``s`` in flight, step ``s + 1``
planned), gives the decoders their real counts, and yields ``t``; the replica waits on the
router's ``routed`` event (fired once the router, which acts first at ``t``, has routed), the
counts go back to their virtual start, and the window goes on. A request the router hands this replica meanwhile waits in the
inbox and is pulled by the window's next plan, as the exact loop would pull it::

    exact   | step s | step s+1 ......|.....| step s+2 (pulls r) |
    window  | step s | step s+1 planned, paused at t -> router: r to this replica -> resume
                                       t

Nothing the router may read differs from exact stepping at ``t``: block tables, the free
queue, the prefix cache and its events are updated eagerly in both; only the decoders' counts
are virtual. While the window waits they are made real, or, for a router that reads only
their sum (outstanding tokens), the sum is corrected.

*Lazy reads.* A router that reads only outstanding tokens need not stop a run of quiet steps
(:mod:`sim.engine.fastforward.runs`) at all: the run's step ends ``T`` are laid out, so the
sum the exact loop would show at any instant ``t`` is known without committing a step
(``StepKernel.virtual_at``). The window then yields a :class:`Nap`: the replica sleeps in SimPy
until the run's next plan, and only a submission to this replica wakes it early. One wake per
run and per request routed here, instead of one pause per arrival at the fleet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Generator
from dataclasses import dataclass
from typing import NamedTuple

from sim.engine.fastforward.decoders import shift
from sim.engine.step import StepKernel
from sim.request import Request


class Pausing(NamedTuple):
    """What a window's runs need to wait for a live router (:func:`pause`) or nap through it."""

    running: list[Request]
    next_arrival: Callable[[], float]   # the router's next arrival
    next_due: Callable[[], float]       # the replica's next own arrival
    real_counts: bool                   # the router reads per-request counts
    lazy: bool                          # ... or only totals, and nothing else reads (lazy reads)


def never() -> float:
    """The next arrival of a source that has none (no live router, no inbox to watch)."""
    return math.inf


@dataclass(frozen=True, slots=True)
class Nap:
    """Sleep until ``until`` (a window's lazy run); ``wakeable``: a submission to the replica
    ends it early. The window is sent the time it woke."""

    until: float
    wakeable: bool


def pause(k: StepKernel, running: list[Request], s: int, real: Collection[int], end: float, na: float,
          next_arrival: Callable[[], float], real_counts: bool) -> Generator[float, None, float]:
    """Wait while the router's next arrival ``na`` falls at or before ``end`` (the end of the
    step the exact loop would have in flight); return the next arrival after.

    ``s`` window steps are done; requests in ``real`` (uids, all running) already hold real
    counts. ``real_counts``: the router reads per-request counts, so every decoder gets its
    real ones while the window waits; else only their total is corrected
    (``StepKernel.virtual_tokens``, which the replica's outstanding tokens subtract)."""
    if not real_counts:
        k.virtual_tokens = s * (len(running) - len(real))
        while end >= na:
            yield na
            na = next_arrival()
        k.virtual_tokens = 0
        return na
    held = [r for r in running if r.uid not in real] if s else []
    shift(held, s)
    while end >= na:
        yield na
        na = next_arrival()
    shift(held, -s)
    return na
