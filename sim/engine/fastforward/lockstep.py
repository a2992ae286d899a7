"""Lockstep windows: fast-forward for an engine whose KV connector completes transfers between
steps (P/D instances, :mod:`sim.cluster.pd`).

A plain window runs ahead of SimPy: it applies steps whose times lie in the future, which is
exact only while nothing outside the replica can act before them (a live router's next
arrival is known, so the window pauses there, :mod:`sim.engine.fastforward.pause`). A P/D
instance is acted on by events no one can foresee: a prefill instance's step that finishes
a prompt hands the request to a decode instance, a KV pull lands, the other side's router
reads it. So a lockstep window sleeps in SimPy through every step it applies, on the same
timeout the exact loop would yield -- created at the same point (the step's launch), for the
same duration -- and SimPy's event order, ties included, is the exact loop's::

    exact     plan s1 | launch | yield timeout(dt) ......... | land | plan s1+1 ...
    lockstep  plan s1 | launch | yield sleep(dt) ........... | land | plan s1+1 ...
                                     ^ a pull lands, a request is handed over, a router reads:
                                       as in exact stepping (decoder counts corrected meanwhile)

What stays cheaper than exact steps is the window's arithmetic: decoders advance virtually,
quiet steps skip the admission pass and time their decodes in O(1). The connector is polled
once per planned step (:class:`Polls`), first, as ``Scheduler.schedule`` does (a step the window
then hands back to the exact loop is not polled again); a poll that reports arrived loads, or
a load still in flight (its request waits in the queue, passed over), makes the step plan
through the full admission pass.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator

from sim.engine.fastforward.decoders import shift
from sim.engine.step import StepKernel
from sim.request import Request

Sleep = Callable[[float], object]  # sleep(dt): the SimPy event the exact loop yields for a step of dt


class Polls:
    """The connector's poll of each planned window step (``Transfers.poll``), and the sleep
    through each step applied (``sleep(dt)``: the event the exact loop yields, a SimPy timeout)."""

    __slots__ = ("k", "sleep", "step", "xfer")

    def __init__(self, k: StepKernel, sleep: Sleep) -> None:
        self.k, self.sleep, self.xfer, self.step = k, sleep, k.sched.transfers, 0

    def __call__(self, now: float, step: int) -> bool:
        """Poll for window step ``step``, planned at ``now``: True when its admission pass must
        run (a load arrived, or one is in flight: its request waits in the queue, passed over)."""
        x = self.xfer
        x.poll(now)
        self.step = step
        return bool(x.received) or x.pending > 0

    def tick(self, running: list[Request], s: int, real: Collection[int], dt: float, real_counts: bool,
             next_due: Callable[[], float]) -> Generator[object, object, float]:
        """Sleep through the step in flight with the replica readable as the exact loop leaves it:
        ``s`` window steps done, requests in ``real`` holding real counts (as ``pause.pause``).
        Returns the replica's next own arrival (a request handed over meanwhile is due)."""
        k = self.k
        if not real_counts:
            k.virtual_tokens = s * (len(running) - len(real))
            yield self.sleep(dt)
            k.virtual_tokens = 0
            return next_due()
        held = [r for r in running if r.uid not in real] if s else []
        shift(held, s)
        yield self.sleep(dt)
        shift(held, -s)
        return next_due()

    def handed_back(self, s: int) -> None:
        """The window ends after ``s`` steps: if it polled for step ``s + 1``, the exact loop
        plans that step at once and skips its poll (``Transfers.polled``)."""
        if self.step > s:
            self.xfer.polled = True
