"""How a replica's loop waits: idle for work, napping through a lazy run, held by a KV connector.

A loop that waits sleeps on one SimPy event and is woken by :meth:`Waits.wake` (a submission, a
KV connector's transfer). Idle, the event is ``_wake``, made for the wait; a nap through a lazy
run (:mod:`sim.engine.fastforward.pause`) sleeps on its timeout alone, and ``wake`` interrupts it
(SimPy's ``Process.interrupt``) only in the rare case it must end early, so a nap costs one event.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import suppress
from typing import Any

import simpy

from sim.engine.fastforward.pause import Nap
from sim.engine.signals import RouterSignals
from sim.engine.sleep import first_of, sleep_until


class Waits(RouterSignals):
    """The waits of :class:`~sim.engine.replica.Replica`'s loop, on its state (they set the
    flags a router reads, :mod:`sim.engine.signals`)."""

    process: simpy.Process
    _wake: simpy.Event | None
    _napping: bool
    _pull: Callable[..., None]

    def _nap(self, nap: Nap) -> Generator[simpy.Event, Any, None]:
        """Sleep until ``nap.until``, or (``wakeable``) until :meth:`wake` interrupts the sleep."""
        at = self.kernel.virtual_at
        if at is not None:  # a lazy run: its reads only fall (decodes) or rise (submissions) until it ends
            self.surely_busy = self.outstanding_tokens - (at(nap.until) - at(self.env.now)) >= 1
        self._napping = nap.wakeable
        with suppress(simpy.Interrupt):  # woken before nap.until
            yield from sleep_until(self.env, nap.until)
        self._napping = self.surely_busy = False

    def _wait_for_work(self) -> Generator[simpy.Event, Any, bool]:
        """Idle: wait for the next arrival of our own inbox or a submission (never polls).
        False when woken by a submission that is still to be pulled."""
        env = self.env
        if self._cursor < len(self._inbox):  # a future arrival from our own inbox
            self._wake = env.event()
            nxt = self._cursor
            yield first_of(env.timeout(max(self._inbox[nxt].arrival_s - env.now, 0.0)), self._wake)
            self._wake = None
            self._pull(env.now, force=nxt + 1)
            return True
        yield from self._await_submission()
        return False

    def _await_submission(self) -> Generator[simpy.Event, Any, None]:
        """Wait, with nothing to do, for :meth:`submit` or :meth:`wake`; a router reads 0 meanwhile."""
        k = self.kernel
        self._wake = self.env.event()
        self.idle = k.virtual_at is None and not k.virtual_tokens  # (the loop's own, unchanged while it waits)
        yield self._wake
        self.idle = False
        self._wake = None

    def _idle_from(self, t: float) -> Generator[simpy.Event, Any, None]:
        """Sleep to ``t``, the end of the window's last step; drained (nothing runs, waits, is
        swapped out, unpulled or held by a KV connector), await a submission at once: one event
        less a request. (None comes before ``t``, a router's next arrival being after the
        window; one that did would be seen at ``t``, as by the exact loop, busy until then.)"""
        env, k, s = self.env, self.kernel, self.kernel.sched
        if s.running or s.num_waiting or s.swapped or self._cursor < len(self._inbox) or k.kv.connector is not None:
            yield from sleep_until(env, t)
            return
        yield from self._await_submission()
        if env.now < t:
            yield from sleep_until(env, t)

    def wake(self) -> None:
        """Wake a waiting or napping loop (a submission, a KV connector's transfer landed or its
        blocks were sent). A nap is interrupted (SimPy's own way, only when it must end early):
        it then sleeps on its timeout alone, not on a wake event made for every nap."""
        if self._napping:
            self._napping = False
            self.process.interrupt()
        elif self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _wait_for_transfers(self) -> Generator[simpy.Event, Any, bool]:
        """Nothing could be scheduled while a KV connector holds requests (a load in flight,
        blocks not yet sent): wait until its next completion (``next_finished_s``) or a
        :meth:`wake`, instead of rejecting. False: nothing held."""
        t = self.kernel.sched.transfers
        c = t.connector
        if c is None or not c.asynchronous or not t.holders([], self.kernel.sched.waiting):
            return False
        env = self.env
        self._wake = env.event()
        nxt = c.next_finished_s()
        yield self._wake if nxt is None else first_of(env.timeout(max(nxt - env.now, 0.0)), self._wake)
        self._wake = None
        return True

