"""Many replicas behind a router, in ONE SimPy environment (the routed fleet replay).

::

    trace --> Router --(policy)--> Replica 0 (scheduler + KV + cost)
                               \\-> Replica 1
                                \\> ...

The router is a SimPy process that sleeps until each arrival and hands the request to the
replica the policy picks (``Replica.submit`` wakes an idle one). Every replica's
``next_arrival`` hint points at the router's next arrival. Policies are plain functions
``(request, replicas, state) -> index``:

- ``round-robin``: 0, 1, 2, ... regardless of load;
- ``least-outstanding-tokens``: the replica with the fewest tokens still to process,
  divided by its ``weight`` (for mixed GPU types);
- ``prefix-affinity``: a stable hash of the request's first prefix block picks the replica
  (so requests sharing a prefix share a cache); requests without prefix content go
  round-robin.

``active(t)`` (optional) limits routing to the first ``active(t)`` replicas, for replaying an
autoscaled fleet.

Static policies (round-robin, prefix-affinity) do not look at replica state, so requests are
assigned up front and every replica replays its own inbox with decode fast-forward. The
dynamic policy (least-outstanding-tokens) routes live on the replicas' state at each arrival,
which needs the replicas to step exactly: a fast-forward window stops before the router's
next arrival, but the state it leaves behind already includes the step that straddles that
arrival, which an exactly stepped replica has not finished yet. Exact stepping is ~2.5x
slower and is the reference.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import simpy

from sim.cluster.monitor import SloMonitor
from sim.cluster.slo import Slo
from sim.config.schema import SimConfig
from sim.engine.replica import Replica
from sim.errors import ConfigError
from sim.io.ingest import make_requests
from sim.io.results import request_frame
from sim.request import Request
from sim.run.build import new_replica
from workloads.schema import Trace

POLICIES = ("round-robin", "least-outstanding-tokens", "prefix-affinity")
STATIC = ("round-robin", "prefix-affinity")  # state-free: can be assigned up front
BOUNDED_LOAD = 2.0


@dataclass(slots=True)
class RouterState:
    weights: list[float]
    block_size: int
    counter: int = 0


Policy = Callable[[Request, Sequence[Replica], RouterState], int]


def round_robin(req: Request, reps: Sequence[Replica], st: RouterState) -> int:
    i = st.counter % len(reps)
    st.counter += 1
    return i


def least_outstanding(req: Request, reps: Sequence[Replica], st: RouterState) -> int:
    loads = [r.outstanding_tokens / st.weights[i] for i, r in enumerate(reps)]
    best = min(loads)
    ties = [i for i, v in enumerate(loads) if v == best]
    st.counter += 1
    return ties[st.counter % len(ties)]  # rotate among ties (e.g. all idle)


def prefix_key(req: Request, block_size: int) -> int | None:
    """Stable 32-bit key of the request's first prefix block, or None without content."""
    c = req.content
    if not isinstance(c, tuple) or not c:
        return None
    if c[0] == "ids":
        first = c[1][:block_size]
    elif c[0] == "hash":
        first = c[1][:1]
    else:
        first = (c[1],)
    return zlib.crc32(np.asarray(first, dtype=np.int64).tobytes())


def prefix_affinity(req: Request, reps: Sequence[Replica], st: RouterState) -> int:
    key = prefix_key(req, st.block_size)
    if key is None:
        return round_robin(req, reps, st)
    return key % len(reps)


POLICY_FUNCS: dict[str, Policy] = {
    "round-robin": round_robin, "least-outstanding-tokens": least_outstanding,
    "prefix-affinity": prefix_affinity,
}


def policy(name: str) -> Policy:
    if name not in POLICY_FUNCS:
        raise ConfigError(f"--router {name!r}: expected one of {', '.join(POLICIES)}")
    return POLICY_FUNCS[name]


class Router:
    def __init__(self, env: simpy.Environment, reps: Sequence[Replica], reqs: list[Request],
                 choose: Policy, state: RouterState, active: Callable[[float], int] | None = None) -> None:
        self.env, self.reps, self.reqs, self.choose, self.state = env, reps, reqs, choose, state
        self.active = active
        self.assigned = np.full(len(reqs), -1, dtype=np.int64)
        self._next = 0
        env.process(self._run())

    def next_arrival(self) -> float:
        return self.reqs[self._next].arrival_s if self._next < len(self.reqs) else math.inf

    def _run(self):  # type: ignore[no-untyped-def]
        env = self.env
        for i, r in enumerate(self.reqs):
            if r.arrival_s > env.now:
                yield env.timeout(r.arrival_s - env.now)
            self._next = i + 1
            n = len(self.reps) if self.active is None else max(1, min(self.active(env.now), len(self.reps)))
            k = self.choose(r, self.reps[:n], self.state)
            self.assigned[r.uid] = k
            self.reps[k].submit(r)


def _assign_static(reqs: list[Request], reps: Sequence[Replica], choose: Policy, state: RouterState,
                   active: Callable[[float], int] | None) -> np.ndarray:
    """Route a state-free policy up front: each replica then replays its own inbox."""
    assigned = np.empty(len(reqs), dtype=np.int64)
    for r in reqs:
        n = len(reps) if active is None else max(1, min(active(r.arrival_s), len(reps)))
        k = 0 if n == 1 else choose(r, reps[:n], state)
        assigned[r.uid] = k
        reps[k].submit(r)
    return assigned


@dataclass(slots=True)
class FleetResult:
    requests: pd.DataFrame            # request_frame columns + "replica"
    steps: list[pd.DataFrame]         # one per replica
    preemptions: list[int]
    aborted: bool = False             # stopped early: the SLO verdict was already "fail"
    failing: tuple[str, ...] = ()     # when aborted: the targets that were certain to fail

    def per_replica(self) -> pd.DataFrame:
        g = self.requests.groupby("replica")
        out = pd.DataFrame({"requests": g.size(), "tokens": g["prompt_tokens"].sum() + g["output_tokens"].sum(),
                            "ttft_p99": g["ttft_s"].quantile(0.99), "tpot_p99": g["tpot_s"].quantile(0.99)})
        out["preemptions"] = [self.preemptions[int(i)] for i in out.index]
        return out


def replay_fleet(cfgs: Sequence[SimConfig], trace: Trace, router: str = "least-outstanding-tokens",
                 *, weights: Sequence[float] | None = None,
                 active: Callable[[float], int] | None = None,
                 stop_on_fail: tuple[Slo, int] | None = None, checks: int = 40) -> FleetResult:
    """Replay ``trace`` through ``len(cfgs)`` replicas (one config each) behind ``router``.

    ``stop_on_fail=(slo, skip)`` checks ``checks`` times over the trace's span whether the SLO
    (on requests ``skip:``) can still pass, and stops the replay when it cannot
    (:mod:`sim.cluster.monitor`); unfinished requests then count as misses.
    """
    if not cfgs:
        raise ConfigError("a fleet needs at least one replica")
    choose = policy(router)
    env = simpy.Environment()
    reps, scheds = [], []
    for cfg in cfgs:
        rep = new_replica(env, cfg)
        reps.append(rep)
        scheds.append(rep.sched)
    reqs = make_requests(trace, cfgs[0])
    state = RouterState(list(weights) if weights else [1.0] * len(cfgs), cfgs[0].block_size)
    if router in STATIC or len(reps) == 1:
        assigned = _assign_static(reqs, reps, choose, state, active)
    else:
        for rep in reps:
            rep.exact_steps = True
        rt = Router(env, reps, reqs, choose, state, active)
        for rep in reps:
            rep.follow_router(rt.next_arrival)
        assigned = rt.assigned
    aborted, failing = False, tuple[str, ...]()
    if stop_on_fail is None:
        env.run()
    else:
        monitor = SloMonitor(stop_on_fail[0], reqs, stop_on_fail[1])
        aborted = _run_monitored(env, monitor, reps, reqs, checks)
        failing = monitor.failing(env.now) if aborted else ()
    frame = request_frame(reqs)
    frame["replica"] = assigned
    return FleetResult(frame, [r.log.frame() for r in reps], [int(s.num_preemptions) for s in scheds],
                       aborted, failing)


def _run_monitored(env: simpy.Environment, monitor: SloMonitor, reps: Sequence[Replica],
                   reqs: list[Request], checks: int) -> bool:
    """Run in ``checks`` chunks over the arrival span; True if the monitor stopped the replay.

    Progress is judged by requests ended, not by ``env.peek()``: after ``run(until=...)``
    SimPy leaves its stop event queued, so the queue never looks empty.
    """
    span = reqs[-1].arrival_s - reqs[0].arrival_s if reqs else 0.0
    every = max(span / max(checks, 1), 1e-3)
    total = len(reqs)
    while sum(len(r.finished) + len(r.rejected) for r in reps) < total:
        if env.peek() == math.inf:
            break  # nothing left to run (cannot happen while requests remain; defensive)
        env.run(until=env.now + every)
        if monitor(env.now):
            return True
    return False
