"""The routed fleet replay: many replicas behind a router, in ONE SimPy environment.

A static policy (round-robin) does not look at replica state, so requests are assigned up
front and every replica replays its own inbox. Live policies (least-outstanding-tokens,
prefix-affinity, which reads the queues for its fallback, kv-aware, dynamo) route at each arrival instant on the replicas' state then
(:mod:`sim.cluster.router`); both keep decode fast-forward, bit-identical to exact stepping.

``active(t)`` (optional) limits routing to the first ``active(t)`` replicas, for replaying an
autoscaled fleet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import simpy

from sim.cluster.monitor import SloMonitor
from sim.cluster.policies import RouterState
from sim.cluster.router import Router, RouterSpec, assign_static, parse_router
from sim.cluster.slo import Slo
from sim.cluster.view import make_view
from sim.collector import no_collections
from sim.config.schema import SimConfig
from sim.engine.replica import Replica
from sim.errors import ConfigError
from sim.frontend.stage import enter, fleet_frontend, leave, no_frontend, step_ends, with_columns
from sim.io.ingest import make_requests
from sim.io.results import request_frame
from sim.request import Request
from sim.run.build import new_replica
from sim.run.clients import open_loop_only
from workloads.schema import Trace


@dataclass(slots=True)
class FleetResult:
    requests: pd.DataFrame            # request_frame columns + "replica"
    steps: list[pd.DataFrame]         # one per replica
    preemptions: list[int]
    aborted: bool = False             # stopped early: the SLO verdict was already "fail"
    failing: tuple[str, ...] = ()     # when aborted: the targets that were certain to fail
    ff_steps: int = 0                 # steps applied by fast-forward, over the fleet
    evictions: tuple[int, ...] = ()   # per replica: prefix-cache blocks evicted

    def per_replica(self) -> pd.DataFrame:
        g = self.requests.groupby("replica")
        out = pd.DataFrame({"requests": g.size(), "tokens": g["prompt_tokens"].sum() + g["output_tokens"].sum(),
                            "ttft_p99": g["ttft_s"].quantile(0.99), "tpot_p99": g["tpot_s"].quantile(0.99)})
        out["preemptions"] = [self.preemptions[int(i)] for i in out.index]
        return out


def replay_fleet(cfgs: Sequence[SimConfig], trace: Trace, router: str | RouterSpec = "least-outstanding-tokens",
                 *, weights: Sequence[float] | None = None,
                 active: Callable[[float], int] | None = None,
                 stop_on_fail: tuple[Slo, int] | None = None, checks: int = 40) -> FleetResult:
    """Replay ``trace`` through ``len(cfgs)`` replicas (one config each) behind ``router``
    (a :class:`RouterSpec` or its text, :func:`sim.cluster.router.parse_router`).

    ``stop_on_fail=(slo, skip)`` checks ``checks`` times over the trace's span whether the SLO
    (on requests ``skip:``) can still pass, and stops the replay when it cannot
    (:mod:`sim.cluster.monitor`); unfinished requests then count as misses.
    """
    if not cfgs:
        raise ConfigError("a fleet needs at least one replica")
    open_loop_only(trace.df, "an open-loop fleet replay", "simulate --cluster sends its turns")
    spec = parse_router(router)
    choose = spec.make()
    env = simpy.Environment()
    reps: list[Replica] = [new_replica(env, cfg) for cfg in cfgs]
    sent = make_requests(trace, cfgs[0])
    fe = fleet_frontend(cfgs)
    ing, reqs = enter(sent, fe) if fe is not None else (None, sent)  # reqs: in engine-arrival order
    B = cfgs[0].block_size
    state = RouterState(list(weights) if weights else [1.0] * len(cfgs), B)
    if spec.uses_view:
        state.view = make_view(spec.view, reps, B, spec.delay_s)
    if spec.static or len(reps) == 1:
        assigned = assign_static(reqs, reps, choose, state, active)
    else:
        rt = Router(env, reps, reqs, choose, state, active)
        for rep in reps:
            rep.follow_router(rt.next_arrival, routed=rt.routed, real_counts=spec.reads_request_counts,
                              lazy_reads=spec.reads_only_totals and stop_on_fail is None)
        assigned = rt.assigned
    aborted, failing = False, tuple[str, ...]()
    with no_collections():
        if stop_on_fail is None:
            env.run()
        else:
            monitor = SloMonitor(stop_on_fail[0], reqs, stop_on_fail[1])
            aborted = _run_monitored(env, monitor, reps, reqs, checks, bound=spec.static or len(reps) == 1)
            failing = monitor.failing(env.now) if aborted else ()
    steps = [r.log.frame() for r in reps]
    api = leave(sent, fe, ing, [step_ends(s) for s in steps], assigned) if fe is not None and ing is not None \
        else no_frontend(sent)
    frame = with_columns(request_frame(sent), api)
    frame["replica"] = assigned  # indexed by uid
    return FleetResult(frame, steps, [int(r.sched.num_preemptions) for r in reps],
                       aborted, failing, sum(r.ff_steps for r in reps), tuple(int(r.kv.evictions) for r in reps))


def _run_monitored(env: simpy.Environment, monitor: SloMonitor, reps: Sequence[Replica],
                   reqs: list[Request], checks: int, bound: bool = False) -> bool:
    """Run in ``checks`` chunks over the arrival span; True if the monitor stopped the replay.

    Progress is judged by requests ended, not by ``env.peek()``: after ``run(until=...)``
    SimPy leaves its stop event queued, so the queue never looks empty. A fast-forward window
    runs ahead of the clock, so requests may have ended before the monitor saw them arrive:
    the checks go on until the clock has passed the last arrival. ``bound`` (replicas fed up
    front, no router to end their windows): the replicas' windows end at each check, as at a
    router's arrival, so a verdict that can only fail stops the work, not just the reading.
    """
    span = reqs[-1].arrival_s - reqs[0].arrival_s if reqs else 0.0
    every = max(span / max(checks, 1), 1e-3)
    total, last = len(reqs), reqs[-1].arrival_s if reqs else 0.0
    check = [env.now + every]
    if bound:
        for rep in reps:
            rep.follow_router(lambda: check[0])
    while (ended := sum(len(r.finished) + len(r.rejected) for r in reps)) < total or env.now < last:
        if ended < total and env.peek() == math.inf:
            break  # nothing left to run (cannot happen while requests remain; defensive)
        check[0] = env.now + every
        env.run(until=check[0])
        if monitor(env.now):
            return True
    return False
