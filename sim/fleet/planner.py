"""The planner: candidates -> per-replica capacity -> fleet size -> routed validation -> table.

::

    for gpu, tp, knobs[, xPyD split] in grid:         # candidate.py
        capacity[c] = bisect QPS of one unit over seeds   # capacity.py (a split: xpyd_plan.py)
    N[c] = ceil(peak_qps x (1 + headroom) / capacity[c]) + k
    best knobs per (gpu, tp) = max capacity per GPU
    validate N by a routed replay of the full trace   # validate.py, router.py
    autoscale schedule vs static peak                 # autoscale.py
    rank passing rows by $/1M output tokens           # (= $/h: same demand for every row)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.cluster.slo import normal_quantile, wilson_lower
from sim.errors import ConfigError
from sim.fleet import autoscale
from sim.fleet.autoscale import AutoscaleCost
from sim.fleet.band import BandEdge, band_columns, band_edges
from sim.fleet.candidate import Candidate, grid
from sim.fleet.capacity import (
    KEEP,
    WARMUP,
    CapacityEstimate,
    SearchSpec,
    combine,
    probe_replica,
    search_seed,
)
from sim.fleet.clients_plan import (
    check_clients,
    client_search,
    closed_demand,
    probe_clients,
    replay_clients,
    unvalidated,
)
from sim.fleet.sizing import size
from sim.fleet.spec import Demand, PlanSpec
from sim.fleet.table import build_table
from sim.fleet.tuning import raised_seq_cap
from sim.fleet.validate import ValidateTask, Validation, replay_replicas, validate_fleet
from sim.fleet.workload import mean_rate, peak_rate, rate_timeline, scale_rate
from sim.fleet.xpyd_plan import probe_split, replay_split
from sim.run.clients import open_loop_only
from sim.run.executor import run_tasks


@dataclass(slots=True)
class Plan:
    spec: PlanSpec
    demand: Demand
    table: pd.DataFrame
    capacities: list[CapacityEstimate]
    validations: dict[Candidate, Validation]
    autoscale: pd.DataFrame | None
    autoscale_cost: AutoscaleCost | None
    scaled: pd.DataFrame
    band: dict[Candidate, BandEdge] = field(default_factory=dict)  # pessimistic edge (sim/fleet/band.py)

    @property
    def best(self) -> pd.Series | None:
        return self.table.iloc[0] if len(self.table) else None


Progress = Callable[[str, int, int], None]


def _search_task(task: tuple[Candidate, SearchSpec, int], df: pd.DataFrame) -> Any:
    cand, spec, rep = task
    probe = probe_clients if spec.clients else probe_replica if cand.split is None else probe_split
    return search_seed(cand, spec, rep, df, probe)


def _validate_task(task: ValidateTask, df: pd.DataFrame) -> Validation:
    replay = replay_clients if task.clients else replay_replicas if task.candidate.split is None else replay_split
    return validate_fleet(task, df, replay)


def measure_demand(df: pd.DataFrame, spec: PlanSpec) -> tuple[pd.DataFrame, Demand]:
    """Scale the trace (``--rate-scale`` or ``--target-qps``) and measure mean and peak QPS;
    or, for N clients, the trace as they send it (:func:`sim.fleet.clients_plan.closed_demand`)."""
    if spec.max_concurrency is not None:
        return closed_demand(df, spec.max_concurrency, spec.client_rate)
    rate0 = mean_rate(df["arrival_s"].to_numpy(np.float64))
    scale = spec.target_qps / rate0 if spec.target_qps else spec.rate_scale
    scaled = scale_rate(df, scale)
    a = scaled["arrival_s"].to_numpy(np.float64)
    return scaled, Demand(
        mean_qps=mean_rate(a), peak_qps=peak_rate(a, spec.peak_window_s), scale=scale,
        mean_output_tokens=float(scaled["output_tokens"].mean()),
        mean_total_tokens=float((scaled["output_tokens"] + scaled["prompt_tokens"]).mean()),
        duration_s=float(a[-1] - a[0]) if len(a) > 1 else 0.0)


def capacities(spec: PlanSpec, cands: list[Candidate], scaled: pd.DataFrame, demand: Demand,
               progress: Progress | None = None) -> list[CapacityEstimate]:
    search = SearchSpec(slo=spec.slo, base=spec.base, q_start=demand.peak_qps,
                        q_min=demand.peak_qps / 256, q_max=demand.peak_qps * 256, iters=spec.iters,
                        window=spec.window, seed=spec.seed)
    if demand.clients:
        search = client_search(search, demand.clients, spec.window, spec.client_rate)
    tasks = [(c, search, r) for c in cands for r in range(spec.replications)]
    if not tasks:
        return []
    done = [0]

    def tick(i: int, _: Any) -> None:
        done[0] += 1
        if progress:
            progress("capacity", done[0], len(tasks))

    res = run_tasks(_search_task, tasks, scaled, backend=spec.backend, workers=spec.workers,
                    address=spec.address, on_done=tick)
    by: dict[Candidate, list[Any]] = {}
    for (c, _, _), r in zip(tasks, res, strict=True):
        by.setdefault(c, []).append(r)
    return [combine(c, by[c]) for c in cands]


def best_per_shape(caps: list[CapacityEstimate], spec: PlanSpec | None = None) -> list[CapacityEstimate]:
    """The candidate with the most QPS per GPU for each (gpu, tp), unified and xPyD apart
    (the best knobs; among splits, the best ratio and router). With ``spec``, QPS per unit
    dollar instead: the same order unless a split mixes GPUs of different prices."""
    def per(c: CapacityEstimate) -> float:
        cand = c.candidate
        return c.qps / (cand.unit_price(spec.prices, spec.price_point) if spec else cand.gpus_per_unit)

    best: dict[tuple[str, int, bool], CapacityEstimate] = {}
    for c in caps:
        key = (c.candidate.gpu, c.candidate.tp, c.candidate.split is None)
        if c.feasible and (key not in best or per(c) > per(best[key])):
            best[key] = c
    return list(best.values())


def validate(spec: PlanSpec, caps: list[CapacityEstimate], scaled: pd.DataFrame, demand: Demand,
             progress: Progress | None = None) -> dict[Candidate, Validation]:
    tasks = [ValidateTask(c.candidate, spec.base, size(demand.load, c.qps, spec.headroom),
                          spec.slo, spec.router, clients=demand.clients or None) for c in best_per_shape(caps, spec)
             if not unvalidated(demand, c.candidate, spec.base)]
    if not tasks:  # no candidate passed at any load: nothing to replay
        return {}
    done = [0]

    def tick(i: int, _: Any) -> None:
        done[0] += 1
        if progress:
            progress("validation", done[0], len(tasks))

    res = run_tasks(_validate_task, tasks, scaled, backend=spec.backend, workers=spec.workers,
                    address=spec.address, on_done=tick)
    return {t.candidate: v for t, v in zip(tasks, res, strict=True)}


def check_window(spec: PlanSpec, num_requests: int) -> None:
    """A p99 target cannot pass on the Wilson lower bound with too few requests (even with no
    miss, the bound of n/n is 1 / (1 + z^2/n)): refuse a window that small up front."""
    n = int(min(spec.window, num_requests) * KEEP * (1 - WARMUP))
    need = max([t.quantile for t in spec.slo.targets] + [spec.slo.attainment or 0.0])
    if wilson_lower(n, n, spec.slo.confidence) < need:
        z2 = normal_quantile(spec.slo.confidence) ** 2
        least = math.ceil(z2 * need / (1 - need) / (KEEP * (1 - WARMUP)))
        raise ConfigError(f"--window {spec.window}: {n} requests per window cannot show a {need:g} share on "
                          f"the {spec.slo.confidence:g} lower bound; use --window >= {least} (x3 for a useful "
                          "margin) or a longer trace")


def run_plan(df: pd.DataFrame, spec: PlanSpec, progress: Progress | None = None, band: bool = True) -> Plan:
    """The whole pipeline on a trace frame (normalized columns); ``band``: also size every
    GPU x TP at the pessimistic edge of the cost model's step-time error band."""
    open_loop_only(df, "plan", "a plan sizes the fleet from the trace's arrival rate")
    check_window(spec, len(df))
    check_clients(spec, len(df))
    scaled, demand = measure_demand(df, spec)
    cands = grid(spec.gpus, spec.tps, spec.knobs, spec.splits)
    caps = capacities(spec, cands, scaled, demand, progress)
    more = raised_seq_cap(list(zip(cands, caps, strict=True))) if spec.raise_seqs else []
    caps += capacities(spec, more, scaled, demand, progress) if more else []
    vals = validate(spec, caps, scaled, demand, progress) if spec.validate else {}
    t, rate = rate_timeline(scaled["arrival_s"].to_numpy(np.float64), spec.bucket_s) if not demand.clients else \
        (np.zeros(0), np.zeros(0))  # a closed loop has no rate to autoscale on
    table = build_table(spec, demand, caps, vals, (t, rate))
    edges: dict[Candidate, BandEdge] = {}
    if band:
        def at_edge(s: PlanSpec, cs: list[Candidate]) -> list[CapacityEstimate]:
            return capacities(s, cs, scaled, demand, (lambda _, d, n: progress("capacity at band edge", d, n))
                              if progress else None)

        edges = band_edges(spec, best_per_shape(caps, spec), demand, at_edge)
    table = band_columns(table, edges, spec)
    sched = cost = None
    if len(table) and table.iloc[0]["max_qps_per_replica"] > 0 and not demand.clients:
        top = table.iloc[0]
        pol = autoscale.AutoscalePolicy(bucket_s=spec.bucket_s, cold_start_s=spec.cold_start_s,
                                        headroom=spec.headroom, n_plus_k=spec.n_plus_k)
        sched = autoscale.schedule(t, rate, float(top["max_qps_per_replica"]), pol)
        cost = autoscale.costs(sched, int(top["replicas"]), float(top["cost_per_hour"]) / int(top["replicas"]),
                               spec.bucket_s)
    return Plan(spec, demand, table, caps, vals, sched, cost, scaled, edges)
