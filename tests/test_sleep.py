"""Sleeping in SimPy (sim/engine/sleep.py): exact float instants, and ``first_of``, which must
order events exactly as SimPy's ``timeout | wake`` condition does (the fast-forward tests
compare whole fleets with exact steps; these pin the primitive itself)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest
import simpy

from sim.engine.sleep import first_of, sleep_until

Wait = Callable[[simpy.Event, simpy.Event], simpy.Event]


def condition(timeout: simpy.Event, wake: simpy.Event) -> simpy.Event:
    return timeout | wake


def scenario(wait: Wait, wake_at: float | None, sleep: float, others: tuple[float, ...]) -> list[tuple[float, str]]:
    """A sleeper waits ``sleep`` or for a wake-up that a waker triggers at ``wake_at`` (None:
    never; 0.0: before the sleeper starts waiting); other processes wake at ``others``.
    Returns who ran when, in order."""
    env = simpy.Environment()
    log: list[tuple[float, str]] = []
    wake = env.event()

    def waker() -> Generator[simpy.Event, Any, None]:
        if wake_at is None:
            return
        yield env.timeout(wake_at)
        wake.succeed()
        log.append((env.now, "waker"))

    def sleeper() -> Generator[simpy.Event, Any, None]:
        if wake_at == 0.0:
            yield env.timeout(0.0)  # the wake-up is processed before the wait starts
        yield wait(env.timeout(sleep), wake)
        log.append((env.now, "sleeper"))
        yield env.timeout(1.0)
        log.append((env.now, "sleeper again"))

    def other(t: float, name: str) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(t)
        log.append((env.now, name))

    env.process(waker())
    env.process(sleeper())
    for i, t in enumerate(others):
        env.process(other(t, f"other {i}"))
    env.run()
    return log


@pytest.mark.parametrize("wake_at", [None, 0.0, 2.0, 5.0, 7.0])
@pytest.mark.parametrize("others", [(), (5.0,), (2.0, 5.0, 6.0), (5.0, 5.0, 2.0)])
def test_first_of_orders_events_as_a_condition_does(wake_at: float | None, others: tuple[float, ...]) -> None:
    """Woken before, at, or after the timeout, or never, beside processes due at the same
    instants: everyone runs at the same times in the same order with either wait."""
    expected = scenario(condition, wake_at, 5.0, others)
    assert scenario(first_of, wake_at, 5.0, others) == expected
    assert ("sleeper" in {n for _, n in expected})


@pytest.mark.parametrize("urgent", [False, True])
def test_sleep_until_lands_on_the_exact_float(urgent: bool) -> None:
    """``now + (t - now)`` rounds off for some pairs; the midpoint hop lands on ``t`` anyway,
    on plain timeouts or urgent ones (a router's); urgent, before a plain event due then."""
    now, t = 0.34525830151341586, 4.7133001698216015
    assert now + (t - now) != t  # (a pair that rounds off)
    env = simpy.Environment()
    seen: list[tuple[float, str]] = []

    def proc() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(now)
        yield from sleep_until(env, t, urgent)
        seen.append((env.now, "sleeper"))

    def other() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(t)
        seen.append((env.now, "other"))

    env.process(other())
    env.process(proc())
    env.run()
    assert seen == ([(t, "sleeper"), (t, "other")] if urgent else [(t, "other"), (t, "sleeper")])
