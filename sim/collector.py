"""The cyclic garbage collector, held back while an engine runs or a trace's requests are built.

A run allocates millions of short-lived containers (step tuples, block lists, SimPy events)
that reference counting frees on its own. CPython's cyclic collector still walks the young
survivors every 700 allocations, and now and then every long-lived object as well: the
trace's requests, the block pool's lists. Those walks find nothing: no run makes cyclic
garbage. With ``gc.callbacks`` on the 70B bench run (19,366 requests) and on the first 6 h of
the day bench (32 replicas), every collection collected 0 objects, and the 70B run's two
collections of 50,000 young objects still cost about 18 ms (2 % of the run). So while a run
lasts, :func:`no_collections` turns automatic collection off and moves everything that
already exists out of the collector's sight (``gc.freeze``: an explicit ``gc.collect()`` by a
caller's hook walks only what the run made). Afterwards collection is as it was and the
frozen objects are handed back (``gc.unfreeze``). A process that already froze objects of its
own (a server about to fork) keeps them frozen: then nothing is frozen or unfrozen here,
since ``gc.unfreeze`` cannot tell whose objects it thaws. Nothing a run computes depends on
when the collector runs, so outputs are unchanged (the golden and fast-forward tests compare
them bit for bit). Memory is unchanged too: what the collector would have freed is nothing.

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


@contextmanager
def no_collections() -> Iterator[Callable[[], None]]:
    """The run inside: no automatic collection, what exists now frozen; gives ``settle()``,
    which freezes what exists by then too (a run's requests and replicas, built inside, out of
    the sight of a hook's explicit collection)."""
    ours = gc.get_freeze_count() == 0  # else the process froze objects itself: leave them be
    if ours:
        gc.freeze()
    with paused():
        try:
            yield gc.freeze if ours else _nothing
        finally:
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
