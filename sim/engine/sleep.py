"""Sleeping in SimPy until an exact float instant (fast-forward's sums of step times).

``now + (t - now)`` is not always ``t`` in floating point when ``t > 2 now``; a hop to the
midpoint first makes the second difference exact (Sterbenz), so the clock lands on the same
float an exact step-by-step run reaches.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy
from simpy.events import URGENT


class Urgent(simpy.events.Event):
    """A timeout that fires before every normal event scheduled for the same instant."""

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        self.env, self.callbacks, self._value, self._ok = env, [], None, True
        env.schedule(self, URGENT, delay)


def sleep_until(env: simpy.Environment, t: float, urgent: bool = False) -> Generator[simpy.Event, Any, None]:
    """Advance ``env.now`` to exactly ``t`` (a process interrupted meanwhile gets the
    :class:`simpy.Interrupt` at once, with ``env.now < t``); ``urgent``: on :class:`Urgent`
    timeouts (a router, acting before the replicas at its instants)."""
    now = env.now
    if now + (t - now) != t:
        d = (t - now) / 2
        yield Urgent(env, d) if urgent else env.timeout(d)
    d = t - env.now
    yield Urgent(env, d) if urgent else env.timeout(d)
    assert env.now == t, (env.now, t)


def first_of(timeout: simpy.Event, wake: simpy.Event) -> simpy.Event:
    """``timeout | wake`` (SimPy's :class:`~simpy.events.Condition`), without its value: an
    event that succeeds when the first of the two is processed. Scheduled as the condition
    is (a plain event that succeeds from the first one's callbacks, at that instant), so
    SimPy's event order is unchanged; what it saves is the condition's bookkeeping, on every
    nap of a replica between a router's arrivals."""
    done = simpy.Event(timeout.env)

    def fire(_: simpy.Event) -> None:
        if not done.triggered:
            done.succeed()

    timeout.callbacks.append(fire)  # (a timeout is pending: it has callbacks)
    if wake.callbacks is None:  # processed already: the condition would succeed at once
        fire(wake)
    else:
        wake.callbacks.append(fire)
    return done
