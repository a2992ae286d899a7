"""The cyclic garbage collector, held back while an engine runs or a trace's requests are built.

A run allocates millions of short-lived containers (step tuples, block lists, SimPy events)
that reference counting frees on its own. CPython's cyclic collector still walks the young
survivors every 700 allocations, and now and then every long-lived object as well: the
trace's requests, the block pool's lists. Those walks find little (callgrind: the collector's
functions were about 4 % of a 70B bench run's instructions, imports included; holding it back
saved about 1 % of its simulation). While a run lasts, :func:`fewer_collections` moves everything
that already exists out of the collector's sight (``gc.freeze``) and lets the youngest
generation grow to ``gen0`` objects before it is walked. Afterwards the thresholds are put back
and the frozen objects are handed back (``gc.unfreeze``). A process that already froze objects
of its own (a server about to fork) keeps them frozen: then nothing is frozen or unfrozen here,
since ``gc.unfreeze`` cannot tell whose objects it thaws. Nothing a run computes depends on
when the collector runs, so outputs are unchanged (the golden and fast-forward tests compare
them bit for bit).

Before a run, a trace's requests are built in one go (:func:`sim.io.ingest.make_requests`):
every one survives, so each young collection promotes them all and, as they pile up, whole
collections walk the growing heap again and again. :func:`paused` turns the collector off
while they are built (a million requests of the day took 3.1 s with it and 1.6 s without);
the objects stay tracked, and the next collection sees them as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

GEN0 = 50_000  # young objects before a collection (CPython's default is 700)


@contextmanager
def fewer_collections(gen0: int = GEN0) -> Iterator[Callable[[], None]]:
    """The run inside: what exists now frozen, a larger youngest generation; gives ``settle()``,
    which freezes what exists by then too (a run's requests and replicas, built inside: else the
    first collection of the run walks them all, the 70B replica's 19,366 requests in about 4 ms)."""
    old = gc.get_threshold()
    ours = gc.get_freeze_count() == 0  # else the process froze objects itself: leave them be
    if ours:
        gc.freeze()
    gc.set_threshold(max(gen0, old[0]), *old[1:])
    try:
        yield gc.freeze if ours else _nothing
    finally:
        gc.set_threshold(*old)
        if ours:
            gc.unfreeze()


def _nothing() -> None:
    return None


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside (a bulk of objects that all live on); as it was after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
