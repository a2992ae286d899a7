"""Sleeping in SimPy until an exact float instant (fast-forward's sums of step times).

``now + (t - now)`` is not always ``t`` in floating point when ``t > 2 now``; a hop to the
midpoint first makes the second difference exact (Sterbenz), so the clock lands on the same
float an exact step-by-step run reaches.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy


def sleep_until(env: simpy.Environment, t: float) -> Generator[simpy.Event, Any, None]:
    """Advance ``env.now`` to exactly ``t``."""
    if env.now + (t - env.now) != t:
        yield env.timeout((t - env.now) / 2)
    yield env.timeout(t - env.now)
    assert env.now == t, (env.now, t)


def sleep_or_wake(env: simpy.Environment, t: float, wake: simpy.Event) -> Generator[simpy.Event, Any, None]:
    """:func:`sleep_until` ``t``, or less: until ``wake`` fires (then ``env.now < t``)."""
    if env.now + (t - env.now) != t:
        yield env.timeout((t - env.now) / 2) | wake
    if not wake.triggered:
        yield env.timeout(t - env.now) | wake
