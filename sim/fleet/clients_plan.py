"""Closed-loop plans (``kvsim plan --max-concurrency N``): capacity counted in clients.

``vllm bench serve --max-concurrency N`` (InferenceX's sweeps, most users' own benchmarks) keeps
N requests in flight and sends the next the moment one finishes. Such load has no arrival rate
to size a fleet by; what a fleet must absorb is N clients. So a closed-loop plan searches, per
candidate, the most clients one replica serves within the SLO (integers, bracketed and bisected
as :func:`sim.fleet.capacity.search_seed` does rates), and sizes the fleet as
``ceil(N x (1 + headroom) / clients per replica)``: a router that balances in-flight work
(least-outstanding-tokens, kv-aware) gives each of R replicas about N / R of them.

The trace gives the requests' shapes, in order; its times are not used: every client sends back
to back (``--request-rate inf``, vLLM's default). With a finite ``--request-rate R`` a request
waits for both its time (drawn at R) and a free client, as in vLLM; a probe of ``c`` clients
then draws its window at ``R x c / N``, the share of the load one of ``N / c`` replicas gets.
A probe with ``c`` clients judges the SLO on the requests sent while all ``c`` were busy: the first ``max(c, warmup share)`` (the opening
burst of ``c`` sends) and the last ``c - 1`` (the drain, with fewer clients left) are left out.
The throughput a replica gives at its capacity (requests per second over the judged requests'
finishes) is the table's ``max_qps_per_replica``; per client it can only rise when a fleet
spreads N over more replicas, so ``N x`` that per-client rate is a lower bound on the fleet's
throughput, and the $/1M-token columns built on it an upper bound.

Validation replays the full trace with N clients through the sized fleet behind the router
(:func:`sim.cluster.disagg.run_cluster`). Behind API servers a fleet's closed loop is not
modelled yet (:func:`sim.run.clients.refuse`), so such a plan is sized from the probes alone
and says so (``--api-server-count 0`` validates without the servers).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pandas as pd

from sim.cluster.disagg import run_cluster
from sim.cluster.replay import FleetResult
from sim.cluster.slo import SloEval, evaluate
from sim.cluster.spec import parse_cluster
from sim.errors import ConfigError
from sim.fleet.binding import Diagnostics, diagnose
from sim.fleet.candidate import Candidate
from sim.fleet.capacity import Probe, SearchSpec, _metrics, _quantile
from sim.fleet.spec import Demand, PlanSpec
from sim.fleet.validate import ValidateTask
from sim.fleet.workload import at_qps, mean_rate, to_trace
from sim.fleet.xpyd import cluster_for
from sim.fleet.xpyd_plan import as_fleet
from sim.run.clients import ClientSpec
from sim.run.simulate import simulate
from sim.run.static import static_parts

UNVALIDATED = ("not validated: a closed loop behind a fleet's API servers is not modelled yet "
               "(--api-server-count 0 validates without them)")


def closed_demand(df: pd.DataFrame, clients: int, rate: float | None = None) -> tuple[pd.DataFrame, Demand]:
    """The trace as N clients send it (every time 0: back to back; or its times, drawn at
    ``rate``) and its demand."""
    sent = df if rate else df.assign(arrival_s=0.0)
    mean = mean_rate(sent["arrival_s"].to_numpy(np.float64)) if rate else math.nan
    return sent, Demand(mean_qps=mean, peak_qps=math.nan, scale=1.0,
                        mean_output_tokens=float(df["output_tokens"].mean()),
                        mean_total_tokens=float((df["output_tokens"] + df["prompt_tokens"]).mean()),
                        duration_s=0.0, clients=clients)


def client_search(slo_spec: SearchSpec, clients: int, window: int, rate: float | None = None) -> SearchSpec:
    """The search over clients: from N down (a replica that takes all N ends the search), at
    most a quarter of a window so that a probe's judged share stays at half of it or more."""
    top = max(1, min(clients, int(window * slo_spec.keep) // 4))
    return SearchSpec(slo=slo_spec.slo, base=slo_spec.base, q_start=float(top), q_min=1.0, q_max=float(top),
                      iters=slo_spec.iters, window=window, keep=slo_spec.keep, warmup=slo_spec.warmup,
                      seed=slo_spec.seed, clients=True, client_rate=rate / clients if rate else 0.0)


def steady(req: pd.DataFrame, c: int, warmup: float) -> pd.DataFrame:
    """The requests sent while all ``c`` clients were busy (module docstring), in send order."""
    req = req.sort_values("request_id", key=lambda s: s.astype(np.int64), kind="stable")
    skip = max(c, int(len(req) * warmup))
    return req.iloc[skip:max(skip, len(req) - (c - 1))]


def throughput(req: pd.DataFrame) -> float:
    """Requests per second over the span of these requests' finishes at the client."""
    done = np.sort((req["arrival_s"] + req["e2e_s"]).dropna().to_numpy(np.float64))
    span = float(done[-1] - done[0]) if len(done) > 1 else 0.0
    return (len(done) - 1) / span if span > 0 else math.nan


def probe_clients(cand: Candidate, spec: SearchSpec, window: pd.DataFrame, q: float
                  ) -> tuple[Probe, dict[str, float], Diagnostics]:
    """One replica with ``q`` clients (the closed-loop counterpart of
    :func:`sim.fleet.capacity.probe_replica`; behind its API server when the config has one)."""
    t0 = time.perf_counter()
    c = int(q)
    cfg = cand.config(spec.base)
    sent = at_qps(window, spec.client_rate * c) if spec.client_rate else window.assign(arrival_s=0.0)
    res = simulate(cfg, to_trace(sent, "<window>"), clients=ClientSpec(c))
    req = steady(res.requests, c, spec.warmup)
    ev = evaluate(req, spec.slo)
    b = static_parts(cfg)[1]
    pre = int(res.requests["num_preemptions"].sum())
    diag = diagnose(res.steps, len(res.requests), pre, b.max_num_seqs, b.max_num_batched_tokens, ev.failing, req)
    m = _metrics(req, res.steps, pre, b.pool_slots, ev)
    m["throughput_rps"] = throughput(req)
    observed = tuple((t, _quantile(req, f"{t.metric}_s", t.quantile)) for t in spec.slo.targets)
    probe = Probe(float(c), ev.passed, ev.attainment, ev.attainment_lower, m["ttft_p99"], m["tpot_p99"],
                  time.perf_counter() - t0, False, observed)
    return probe, m, diag


def replay_clients(task: ValidateTask, n: int, df: pd.DataFrame) -> tuple[SloEval, FleetResult, float]:
    """The full trace from ``task.clients`` clients through ``n`` replicas behind the router."""
    t0 = time.perf_counter()
    c = task.clients
    if c is None:
        raise ConfigError("a closed-loop validation needs its number of clients")
    cand = task.candidate
    mapping = cluster_for(0, n, {}, "rdma-ndr", task.router, 0, {"unified": cand.settings(task.base)})
    res = run_cluster(parse_cluster(mapping, cand.label), to_trace(df, "<full trace>"), clients=ClientSpec(c))
    fleet = as_fleet(res)
    req = steady(fleet.requests, c, 0.0)
    return evaluate(req, task.slo), fleet, time.perf_counter() - t0


def unvalidated(demand: Demand, cand: Candidate, base: dict[str, Any]) -> bool:
    """Whether ``cand``'s fleet cannot be validated: N clients behind its API servers (module
    docstring; :data:`UNVALIDATED` says why)."""
    return bool(demand.clients and cand.config(base).api_server_count)


def check_clients(spec: PlanSpec, rows: int) -> None:
    """Refuse in one line what a closed-loop plan cannot take (module docstring)."""
    n = spec.max_concurrency
    if n is None:
        return
    if spec.splits:
        raise ConfigError("not modelled yet: plan --max-concurrency with --disagg (an xPyD group's capacity is "
                          "searched in rates only)")
    if spec.rate_scale != 1.0 or spec.target_qps is not None:
        raise ConfigError("--max-concurrency sends the trace back to back; --rate-scale / --target-qps rescale "
                          "its times, which it does not use: give one")
    if rows < 4 * n:
        raise ConfigError(f"--max-concurrency {n}: the trace's {rows} requests are too few to judge {n} clients "
                          f"at a steady state (a plan needs at least 4 x N = {4 * n})")


def is_closed(row: pd.Series) -> bool:
    """Whether a plan-table row was sized for clients (a closed loop), not a rate."""
    return bool(pd.notna(row.get("clients", math.nan)))


def load_text(row: pd.Series, value: float) -> str:
    """A unit's capacity as the row's plan counts it: whole clients, or QPS."""
    return f"{int(value)} clients" if is_closed(row) else f"{value:.1f} QPS"


def capacity_sentence(b: pd.Series, word: str) -> str:
    """The recommendation's capacity clause for a closed-loop row."""
    return (f"One {word} serves {int(b['max_clients_per_replica'])} clients within the SLO (95% CI "
            f"{b['clients_ci_low']:.1f}–{b['clients_ci_high']:.1f}; {b['max_qps_per_replica']:.2f} req/s at that "
            f"load); demand {int(b['clients'])} clients")


def demand_line(d: Demand) -> str:
    """The plan.md load sentence of a closed loop."""
    if d.mean_qps == d.mean_qps:
        how, cost = f"at most {d.mean_qps:.2f} req/s (--request-rate)", "that rate"
    else:
        how, cost = "back to back", "N x the per-client rate measured at a replica's capacity (at least the fleet's)"
    return (f"Load: {d.clients} clients sending {how} (closed loop, `--max-concurrency {d.clients}`; "
            f"the trace's request shapes in order); $/1M tokens at {cost}.")


METHOD = ("- Per-replica capacity: bisection over whole numbers of clients (closed loop; at most a quarter of a "
          "window) on {reps} replications, each a {win}, thinned to 90% (seed {seed}); the SLO is judged on the "
          "requests sent while every client was busy (the first max(N, 10%) and the last N - 1 left out). "
          "Capacity = mean over replications, 95% Student-t CI.")
