"""Closed-loop clients behind a cluster's router (issue 49): sends made at finishes, routed then.

A closed-loop client (:mod:`sim.run.clients`: ``--max-concurrency``, or a session trace) sends its
next request when an earlier one finishes, or a think time later. Behind a router that send may
go to any instance, at an instant no instance could foresee, and a fast-forward window that had
run past it would have missed it. So every instance of such a run takes exact steps (the outputs
a fast-forward gives, at exact steps' speed), and a send is routed by the cluster's own router:

- at once, from inside the finishing instance's step, when it is due now (a slot freed by a
  finish), as a single replica's inbox takes it: it is in a queue by the next step any instance
  plans at that instant;
- on an urgent SimPy event at its time otherwise (a session's think time, a rate's later
  arrival), as the router routes a trace's arrivals.

Not lockstep windows (:mod:`sim.engine.fastforward.lockstep`), which P/D instances use: a send
is routed from inside the finishing instance's window, whose decoders' counts are then still
virtual, so a router that reads them (least-outstanding-tokens) saw other counts than after an
exact step. Tried on 3 instances: identical for kv-aware, not for least-outstanding-tokens.

Unified instances only, for now: a prefill/decode split is refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from sim.engine.replica import Replica
from sim.engine.sleep import sleep_until
from sim.errors import ConfigError
from sim.request import Request
from sim.run.clients import ClosedLoop


class FleetSends:
    """The ``send`` of a :class:`~sim.run.clients.ClosedLoop` behind a router: ``route`` each
    request at its ``arrival_s`` (its send time, set by the loop), never before."""

    def __init__(self, env: simpy.Environment, route: Callable[[Request], None]) -> None:
        self.env, self.route = env, route

    def __call__(self, r: Request) -> None:
        if r.arrival_s <= self.env.now:
            self.route(r)
        else:
            self.env.process(self._at(r))

    def _at(self, r: Request) -> Generator[simpy.Event, Any, None]:
        yield from sleep_until(self.env, r.arrival_s, urgent=True)
        self.route(r)


def behind_router(loop: ClosedLoop, reps: Sequence[Replica], roles: Sequence[str],
                  route: Callable[[Request], None]) -> list[Request]:
    """Hook ``loop`` to every instance, each on exact steps (module docstring); return the
    requests sent at their own times, in arrival order (the router's first arrivals)."""
    split = sorted({x for x in roles if x != "unified"})
    if split:
        raise ConfigError(f"not modelled yet: closed-loop clients (--max-concurrency, sessions) with "
                          f"{' and '.join(split)} instances (unified instances only)")
    for rep in reps:
        rep.exact_steps = True
    loop.hook(reps, FleetSends(reps[0].env, route))
    return sorted(loop.first(), key=lambda r: r.arrival_s)
