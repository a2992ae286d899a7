"""Closed-loop clients behind a cluster's router (issue 49): sends made at finishes, routed then.

A closed-loop client (:mod:`sim.run.clients`: ``--max-concurrency``, or a session trace) sends its
next request when an earlier one finishes, or a think time later. Behind a router that send may
go to any instance, at an instant no instance could foresee, and a fast-forward window that had
run past it would have missed it. So every instance of such a run takes exact steps (right by
construction, at exact steps' speed), and a send is routed by the cluster's own router:

- at once, from inside the finishing instance's step, when it is due now (a slot freed by a
  finish), as a single replica's inbox takes it: it is in a queue by the next step any instance
  plans at that instant;
- on an urgent SimPy event at its time otherwise (a session's think time, a rate's later
  arrival), as the router routes a trace's arrivals.

Not lockstep windows (:mod:`sim.engine.fastforward.lockstep`), which P/D instances use: a send
is routed from inside the finishing instance's window, whose decoders' counts are then still
virtual, so a router that reads them (least-outstanding-tokens) saw other counts than after an
exact step. Tried on 3 instances: identical for kv-aware, not for least-outstanding-tokens.

With prefill and decode instances, a request leaves the client's count where the client sees
it leave: finished or rejected on its decode (or unified) instance, or rejected on a prefill
instance; a prompt done on a prefill instance frees nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from sim.engine.replica import Replica
from sim.engine.sleep import sleep_until
from sim.request import Request, Status
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
                  route: Callable[[Request], None], original: Callable[[Request], Request]) -> list[Request]:
    """Hook ``loop`` to the cluster, every instance on exact steps (module docstring); return the
    requests sent at their own times, in arrival order (the router's first arrivals).

    A request leaves where the client sees it leave: finished or rejected on a unified or decode
    instance, or its prompt rejected on a prefill instance (``original``: the request of a
    prefill instance's copy). A prompt done on a prefill instance frees nothing: it goes on."""
    for rep in reps:
        rep.exact_steps = True
    front = [rep for rep, role in zip(reps, roles, strict=True) if role != "prefill"]
    loop.hook(front, FleetSends(reps[0].env, route))

    def prompt_rejected(gone: list[Request], t: float) -> None:
        loop.done([original(c) for c in gone if c.status is Status.REJECTED], t)

    for rep, role in zip(reps, roles, strict=True):
        if role == "prefill":
            rep.kernel.on_done = prompt_rejected
    return sorted(loop.first(), key=lambda r: r.arrival_s)
