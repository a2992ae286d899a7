"""Sleeping in SimPy until an exact float instant (fast-forward's sums of step times).

``now + (t - now)`` is not always ``t`` in floating point when ``t > 2 now``; a hop to the
midpoint first makes the second difference exact (Sterbenz), so the clock lands on the same
float an exact step-by-step run reaches.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy


def sleep_until(env: simpy.Environment, t: float, wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
    """Advance ``env.now`` to exactly ``t``; with ``wake``, or less: until it fires (then
    ``env.now < t``)."""
    def hop(dt: float) -> simpy.Event:
        return env.timeout(dt) if wake is None else env.timeout(dt) | wake

    if env.now + (t - env.now) != t:
        yield hop((t - env.now) / 2)
    if wake is None or not wake.triggered:
        yield hop(t - env.now)
    assert wake is not None or env.now == t, (env.now, t)
