"""Replica capacity: the highest QPS one replica sustains within the SLO, with a CI.

For each replication (seed) we draw a window of the trace (``workload.draw_window``) and find
the highest mean arrival rate at which the replica still passes the SLO (``slo.evaluate``,
judged on the Wilson lower bound), by

1. bracketing: start at ``q_start`` (the demand), double or halve until pass/fail flips;
2. bisecting the bracket in log space ``iters`` times (3 iterations of a 2x bracket = 9 %;
   the spread between seeds is usually wider than that).

The first ``warmup`` share of a window's requests is left out of the SLO check (the replica
starts empty). Capacity is the mean over seeds with a Student-t confidence interval. The
binding constraint is read off the lowest failing probe, i.e. just above capacity.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from sim.cluster.replay import replay_fleet
from sim.cluster.slo import Slo, SloEval, SloTarget, evaluate
from sim.config.schema import SimConfig
from sim.errors import ConfigError
from sim.fleet import breakdown
from sim.fleet.binding import Diagnostics, classify, diagnose
from sim.fleet.candidate import Candidate
from sim.fleet.workload import at_qps, draw_window, to_trace
from sim.io.results import memory_breakdown
from sim.run.static import static_parts

KEEP = 0.9     # thinning: share of a window's requests kept
WARMUP = 0.1   # share of a window's first requests left out of the SLO check


@dataclass(frozen=True, slots=True)
class SearchSpec:
    """How to search (shared by all candidates)."""

    slo: Slo
    base: dict[str, Any]          # SimConfig settings common to all candidates (model, cost...)
    q_start: float
    q_min: float
    q_max: float
    iters: int = 3
    window: int = 2000
    keep: float = KEEP
    warmup: float = WARMUP
    seed: int = 0
    clients: bool = False   # search whole numbers of clients, not rates (sim/fleet/clients_plan.py)
    client_rate: float = 0.0   # ... each keeping to this rate (--request-rate / N); 0: back to back


@dataclass(frozen=True, slots=True)
class Probe:
    qps: float
    passed: bool
    attainment: float
    attainment_lower: float
    ttft_p99: float
    tpot_p99: float
    wall_s: float
    stopped_early: bool = False
    observed: tuple[tuple[SloTarget, float], ...] = ()   # each target's quantile among finished requests


@dataclass(slots=True)
class SeedCapacity:
    candidate: Candidate
    rep: int
    qps: float                                  # highest passing probe (0 if none)
    probes: list[Probe] = field(default_factory=list)
    at_capacity: dict[str, float] = field(default_factory=dict)   # metrics of the passing run
    above: Diagnostics | None = None            # diagnostics of the lowest failing run
    hit_ceiling: bool = False
    error: str = ""


def _metrics(req: pd.DataFrame, steps: pd.DataFrame, preemptions: int, pool_slots: int,
             ev: SloEval, roles: tuple[str, ...] = ("unified",)) -> dict[str, float]:
    mem = memory_breakdown(steps)

    def pct(col: str, q: float) -> float:
        v = req[col].dropna().to_numpy()
        return float(np.percentile(v, q)) if len(v) else math.nan

    return {
        "attainment": ev.attainment, "attainment_lower": ev.attainment_lower,
        "ttft_p50": pct("ttft_s", 50), "ttft_p99": pct("ttft_s", 99),
        "tpot_p50": pct("tpot_s", 50), "tpot_p99": pct("tpot_s", 99),
        "kv_util": 1.0 - mem["free"] if len(steps) else 0.0,
        "frag_share": mem["internal_frag"] + mem["external_frag"],
        "preempt_per_1k": 1000.0 * preemptions / max(len(req), 1),
        "kv_tokens": float(pool_slots),
        **breakdown.summary(req, steps, list(roles)),   # TTFT parts, busy share per role
    }


def _quantile(req: pd.DataFrame, col: str, q: float) -> float:
    v = req[col].dropna().to_numpy(np.float64)
    return float(np.quantile(v, q)) if len(v) else math.nan


def _probe(cfg: SimConfig, spec: SearchSpec, window: pd.DataFrame, qps: float
           ) -> tuple[Probe, dict[str, float], Diagnostics]:
    """One replica, one rate. A 1-replica routed replay is bit-identical to ``simulate`` and
    stops as soon as the SLO can no longer pass (``sim.cluster.monitor``: the misses already
    certain put the quantile's lower bound below the target), so a probe that passes is never
    stopped. A stopped probe is ``stopped_early``: its latency quantiles (``observed``,
    ``ttft_p99``...) are those of the requests that finished, a lower bound of the full run's.

    The KV budget and the cost model are built once per candidate and process
    (:func:`sim.run.static.static_parts`), not once per probe."""
    t0 = time.perf_counter()
    trace = to_trace(at_qps(window, qps), "<window>")
    skip = int(len(trace.df) * spec.warmup)
    res = replay_fleet([cfg], trace, "round-robin", stop_on_fail=(spec.slo, skip))
    req = res.requests.iloc[skip:]
    ev = evaluate(req, spec.slo)
    b = static_parts(cfg)[1]
    steps = res.steps[0]
    # a run stopped early counts its unfinished requests as misses of every target: take the
    # targets that were certain to fail from the monitor instead
    failing = res.failing if res.aborted else ev.failing
    diag = diagnose(steps, len(res.requests), res.preemptions[0], b.max_num_seqs,
                    b.max_num_batched_tokens, failing, req)
    m = _metrics(req, steps, res.preemptions[0], b.pool_slots, ev)
    observed = tuple((t, _quantile(req, f"{t.metric}_s", t.quantile)) for t in spec.slo.targets)
    probe = Probe(qps, ev.passed, ev.attainment, ev.attainment_lower, m["ttft_p99"], m["tpot_p99"],
                  time.perf_counter() - t0, res.aborted, observed)
    return probe, m, diag


ProbeFn = Callable[[Candidate, SearchSpec, pd.DataFrame, float], tuple[Probe, dict[str, float], Diagnostics]]


def probe_replica(cand: Candidate, spec: SearchSpec, window: pd.DataFrame, qps: float
                  ) -> tuple[Probe, dict[str, float], Diagnostics]:
    """The probe of a unified candidate: one replica (:func:`_probe`)."""
    return _probe(cand.config(spec.base), spec, window, qps)


def search_seed(cand: Candidate, spec: SearchSpec, rep: int, trace_df: pd.DataFrame,
                probe: ProbeFn = probe_replica) -> SeedCapacity:
    """Bracket then bisect the max passing QPS of one unit for one replication (runs in a
    worker). ``probe`` runs the unit at one rate: one replica by default, an xPyD group with
    :func:`sim.fleet.xpyd_plan.probe_split`. A ConfigError (a shape that does not fit) ends the
    search with the error as the candidate's note."""
    out = SeedCapacity(cand, rep, 0.0)
    for role in ("unified",) if cand.split is None else ("prefill", "decode"):
        try:
            static_parts(cand.config(spec.base, role))  # fail fast (and build budget + cost tables once)
        except ConfigError as e:
            out.error = str(e) if cand.split is None else f"{role} instances: {e}"
            return out
    window = draw_window(trace_df, spec.seed, rep, spec.window, spec.keep)
    lo, hi = 0.0, math.inf

    def run(q: float) -> bool:
        nonlocal lo, hi
        p, m, d = probe(cand, spec, window, q)
        out.probes.append(p)
        if p.passed and q > lo:
            lo, out.at_capacity = q, m
        elif not p.passed and q < hi:
            hi, out.above = q, d
        return p.passed

    whole = math.floor if spec.clients else float  # clients: whole numbers (module docstring)
    try:
        q = min(max(spec.q_start, spec.q_min), spec.q_max)
        if run(q):
            while hi == math.inf and q < spec.q_max:
                q = min(q * 2, spec.q_max)
                run(q)
            out.hit_ceiling = hi == math.inf
        else:
            while lo == 0.0 and q > spec.q_min:
                q = max(whole(q / 2), spec.q_min)
                run(q)
        for _ in range(spec.iters if lo > 0 and hi < math.inf else 0):
            mid = math.sqrt(lo * hi) if not spec.clients else float(min(max(math.floor(math.sqrt(lo * hi)), lo + 1), hi - 1))
            if not lo < mid < hi:  # whole numbers: lo and hi adjacent
                break
            run(mid)
    except ConfigError as e:  # a P/D shape found not to fit when its cluster is built
        out.error = str(e)
        return out
    out.qps = lo
    return out


@dataclass(slots=True)
class CapacityEstimate:
    candidate: Candidate
    qps: float                 # mean over seeds
    ci_low: float
    ci_high: float
    seeds: list[SeedCapacity]
    at_capacity: dict[str, float]
    binding: str
    diagnostics: dict[str, Any]
    error: str = ""

    @property
    def feasible(self) -> bool:
        return not self.error and self.qps > 0


def _nanmean(v: list[float]) -> float:
    a = np.asarray(v, dtype=np.float64)
    return float(np.nanmean(a)) if np.isfinite(a).any() else math.nan  # all-NaN (a role it lacks): no warning


def combine(cand: Candidate, seeds: list[SeedCapacity], confidence: float = 0.95) -> CapacityEstimate:
    """Mean capacity over seeds, a Student-t CI, averaged metrics and the majority binding."""
    errs = [s.error for s in seeds if s.error]
    if errs:
        return CapacityEstimate(cand, 0.0, 0.0, 0.0, seeds, {}, "does-not-fit", {}, errs[0])
    q = np.array([s.qps for s in seeds])
    mean = float(q.mean())
    if len(q) > 1:
        half = float(student_t.ppf(0.5 + confidence / 2, len(q) - 1) * q.std(ddof=1) / math.sqrt(len(q)))
    else:
        half = 0.0
    caps = [s.at_capacity for s in seeds if s.at_capacity]
    metrics = {k: _nanmean([c[k] for c in caps]) for k in caps[0]} if caps else {}
    above = [s.above for s in seeds if s.above is not None]
    if above:
        labels = [classify(d) for d in above]
        binding = max(sorted(set(labels)), key=labels.count)  # ties: alphabetical (deterministic)
        diag = {k: float(np.mean([getattr(d, k) for d in above]))
                for k in ("queued_share", "kv_full_share", "seq_cap_share", "token_cap_share", "preempt_per_1k",
                          "prefill_step_share", "tail_wait_share", "kv_blocked_share", "transfer_share",
                          "recv_wait_share")}
    else:
        binding, diag = "none (search ceiling)", {}
    return CapacityEstimate(cand, mean, max(0.0, mean - half), mean + half, seeds, metrics, binding, diag)
