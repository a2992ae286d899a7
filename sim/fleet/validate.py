"""Whole-fleet validation: replay the full trace through N replicas behind the router.

Per-replica capacity x N is optimistic when the router imbalances load (round-robin with mixed
request sizes) or loses prefix locality, and pessimistic at large N (pooling). So after sizing
we replay the *full* scaled trace through the fleet and judge the SLO on all its requests. If
it fails we add replicas (up to ``max_extra``); if it passes we try one fewer (pooling), as
Vidur/DistServe-style search does (capacity-planning.md 1.4).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.cluster.replay import FleetResult, replay_fleet
from sim.cluster.slo import Slo, SloEval, evaluate
from sim.fleet.candidate import Candidate
from sim.fleet.workload import to_trace


@dataclass(frozen=True, slots=True)
class ValidateTask:
    candidate: Candidate
    base: dict[str, Any]
    replicas: int
    slo: Slo
    router: str
    max_extra: int = 3
    try_fewer: bool = True
    clients: int | None = None   # a closed loop's N clients (sim/fleet/clients_plan.py)


@dataclass(slots=True)
class Validation:
    candidate: Candidate
    replicas: int                       # smallest replica count that passed (or the last tried)
    passed: bool
    tries: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    ttft: np.ndarray | None = None      # of the accepted fleet, for the CDF plot
    tpot: np.ndarray | None = None
    per_replica: pd.DataFrame | None = None


Replay = Callable[[ValidateTask, int, pd.DataFrame], tuple[SloEval, FleetResult, float]]


def replay_replicas(task: ValidateTask, n: int, df: pd.DataFrame) -> tuple[SloEval, FleetResult, float]:
    """``n`` unified replicas behind the task's router (stopped once the SLO cannot pass)."""
    t0 = time.perf_counter()
    cfg = task.candidate.config(task.base)
    res = replay_fleet([cfg] * n, to_trace(df, "<full trace>"), task.router, stop_on_fail=(task.slo, 0))
    return evaluate(res.requests, task.slo), res, time.perf_counter() - t0


def _metrics(ev: SloEval, req: pd.DataFrame, preempt: int) -> dict[str, float]:
    def pct(col: str, q: float) -> float:
        v = req[col].dropna().to_numpy()
        return float(np.percentile(v, q)) if len(v) else float("nan")
    return {"attainment": ev.attainment, "attainment_lower": ev.attainment_lower,
            "ttft_p50": pct("ttft_s", 50), "ttft_p99": pct("ttft_s", 99),
            "tpot_p50": pct("tpot_s", 50), "tpot_p99": pct("tpot_s", 99),
            "preempt_per_1k": 1000.0 * preempt / max(len(req), 1)}


def validate_fleet(task: ValidateTask, df: pd.DataFrame, replay: Replay = replay_replicas) -> Validation:
    """Find the smallest N near ``task.replicas`` whose routed replay passes (runs in a worker);
    ``replay`` runs N units (replicas, or xPyD groups: :func:`sim.fleet.xpyd_plan.replay_split`)."""
    out = Validation(task.candidate, task.replicas, False)

    def attempt(n: int) -> bool:
        ev, res, wall = replay(task, n, df)
        out.tries.append({"replicas": n, "passed": ev.passed, "attainment": ev.attainment,
                          "attainment_lower": ev.attainment_lower, "failing": ";".join(ev.failing),
                          "stopped_early": res.aborted, "wall_s": round(wall, 2)})
        if ev.passed or not out.passed:
            out.replicas, out.passed = n, ev.passed
            out.metrics = _metrics(ev, res.requests, sum(res.preemptions))
            out.ttft = res.requests["ttft_s"].to_numpy()
            out.tpot = res.requests["tpot_s"].to_numpy()
            out.per_replica = res.per_replica()
        return ev.passed

    n = max(task.replicas, 1)
    if attempt(n):
        if task.try_fewer and n > 1:
            attempt(n - 1)
        return out
    for extra in range(1, task.max_extra + 1):
        if attempt(n + extra):
            break
    return out
