"""The ranked plan table: one row per candidate, recommended (cheapest passing) row first."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from sim.fleet import autoscale
from sim.fleet.breakdown import PARTS
from sim.fleet.capacity import CapacityEstimate
from sim.fleet.clients_plan import UNVALIDATED, unvalidated
from sim.fleet.explain import cost_model_of, infeasible_note
from sim.fleet.sizing import size
from sim.fleet.spec import Demand, PlanSpec
from sim.fleet.validate import Validation

# price_per_gpu_hour: one unit's $/h over its GPUs (an xPyD group with a GPU per role blends the two)
# per unit at capacity (one replica, or one xPyD group): mean TTFT parts (they sum to ttft_mean),
# busy share per role, busiest link, pulls blocked on decode blocks (sim/fleet/breakdown.py, xpyd_plan.py)
AT_CAPACITY = (*(f"ttft_{p}" for p in PARTS), "ttft_mean", "busy_unified", "busy_prefill", "busy_decode",
               "link_util", "kv_blocked_per_1k")
COLUMNS = (
    "gpu", "tp", "shape", "router", "knobs", "replicas", "gpus", "gpus_per_unit", "replicas_math", "slo_pass",
    "validated", "attainment", "attainment_lower", "max_qps_per_replica", "qps_ci_low", "qps_ci_high",
    "peak_qps", "headroom_pct", "cost_per_hour", "cost_per_1m_out_tokens", "cost_per_1m_tokens",
    "cost_per_day", "autoscale_cost_per_day", "price_per_gpu_hour", "price_unverified",
    "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "kv_tokens", "kv_util", "frag_share",
    "preempt_per_1k", "binding_constraint", "cost_model", "cost_basis", "requests_per_gpu_dollar",
    *AT_CAPACITY, "note", "clients", "max_clients_per_replica", "clients_ci_low", "clients_ci_high",
)


def _row(spec: PlanSpec, demand: Demand, cap: CapacityEstimate, val: Validation | None,
         timeline: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    c = cap.candidate
    usd_unit = c.unit_price(spec.prices, spec.price_point)   # each role's GPUs at its own price
    usd_gpu = usd_unit / c.gpus_per_unit                       # blended over the roles' GPUs
    unverified = [g for g in c.gpu_names if spec.prices[g].unverified]
    n_math = size(demand.load, cap.qps, spec.headroom)
    n_base = val.replicas if val is not None else n_math
    n = n_base + spec.n_plus_k if cap.feasible else 0
    m = dict(cap.at_capacity)
    if val is not None:
        m.update(val.metrics)
    per_hour = n * usd_unit if n else math.nan
    rate = closed_rate(demand, cap) if demand.clients else demand.mean_qps
    out_tok_h = rate * demand.mean_output_tokens * 3600 / 1e6
    tot_tok_h = rate * demand.mean_total_tokens * 3600 / 1e6
    passed = bool(val.passed) if val is not None else cap.feasible
    auto = math.nan
    if cap.feasible and len(timeline[0]):
        pol = autoscale.AutoscalePolicy(bucket_s=spec.bucket_s, cold_start_s=spec.cold_start_s,
                                        headroom=spec.headroom, n_plus_k=spec.n_plus_k)
        sch = autoscale.schedule(timeline[0], timeline[1], cap.qps, pol)
        ac = autoscale.costs(sch, n, usd_unit, spec.bucket_s)
        auto = ac.autoscale_cost / ac.hours * 24 if ac.hours else math.nan
    notes = []
    if cap.error:
        notes.append(cap.error)
    if infeasible := infeasible_note(cap, spec.slo):
        notes.append(infeasible)
    if val is not None and not val.passed:
        notes.append(f"routed replay fails at {val.replicas} replicas")
    if spec.validate and cap.feasible and unvalidated(demand, c, spec.base):
        notes.append(UNVALIDATED)
    if any(s.hit_ceiling for s in cap.seeds):
        notes.append("one replica serves all the clients" if demand.clients and cap.qps >= demand.clients else
                     "capacity hit the search ceiling" + (" (a quarter of --window)" if demand.clients else ""))
    if unverified:
        notes.append("price unverified" + ("" if len(c.gpu_names) == 1 else f" ({', '.join(unverified)})"))
    cost_name, basis = cost_model_of(c, spec.base)
    return {
        "gpu": c.gpu, "tp": c.tp, "shape": c.shape, "router": spec.router if c.split is None else c.split.router,
        "knobs": c.knob_text, "replicas": n, "gpus": n * c.gpus_per_unit, "gpus_per_unit": c.gpus_per_unit,
        "replicas_math": n_math + spec.n_plus_k if cap.feasible else 0,
        "slo_pass": passed and cap.feasible, "validated": val is not None,
        "attainment": m.get("attainment", math.nan), "attainment_lower": m.get("attainment_lower", math.nan),
        **_capacity(demand, cap),
        "headroom_pct": 100 * (1 - demand.load / (n_base * cap.qps)) if cap.qps > 0 and n_base else math.nan,
        "cost_per_hour": per_hour,
        "cost_per_1m_out_tokens": per_hour / out_tok_h if out_tok_h else math.nan,
        "cost_per_1m_tokens": per_hour / tot_tok_h if tot_tok_h else math.nan,
        "cost_per_day": per_hour * 24, "autoscale_cost_per_day": auto,
        "price_per_gpu_hour": usd_gpu, "price_unverified": bool(unverified),
        **{k: m.get(k, math.nan) for k in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "kv_tokens",
                                          "kv_util", "frag_share", "preempt_per_1k")},
        "binding_constraint": cap.binding, "cost_model": cost_name, "cost_basis": basis,
        "requests_per_gpu_dollar": _served(demand, cap) * 3600 / usd_unit if usd_unit else math.nan,
        **{k: cap.at_capacity.get(k, math.nan) for k in AT_CAPACITY},
        "note": "; ".join(notes),
    }


def closed_rate(demand: Demand, cap: CapacityEstimate) -> float:
    """A closed loop's fleet throughput, at least: its --request-rate (met, as the SLO passed), or
    N clients at the per-client rate measured at a replica's capacity (:mod:`sim.fleet.clients_plan`)."""
    if demand.mean_qps == demand.mean_qps:
        return demand.mean_qps
    return demand.clients * cap.at_capacity.get("throughput_rps", math.nan) / cap.qps if cap.qps > 0 else math.nan


def _served(demand: Demand, cap: CapacityEstimate) -> float:
    """Requests per second one replica serves at its capacity."""
    return cap.at_capacity.get("throughput_rps", math.nan) if demand.clients else cap.qps


def _capacity(demand: Demand, cap: CapacityEstimate) -> dict[str, Any]:
    """The capacity columns: rates, or for a closed loop clients (and the rate served at capacity)."""
    if not demand.clients:
        return {"max_qps_per_replica": cap.qps, "qps_ci_low": cap.ci_low, "qps_ci_high": cap.ci_high,
                "peak_qps": demand.peak_qps}
    return {"max_qps_per_replica": _served(demand, cap), "qps_ci_low": math.nan, "qps_ci_high": math.nan,
            "peak_qps": math.nan, "clients": demand.clients, "max_clients_per_replica": cap.qps,
            "clients_ci_low": cap.ci_low, "clients_ci_high": cap.ci_high}


def build_table(spec: PlanSpec, demand: Demand, caps: list[CapacityEstimate],
                vals: dict[Any, Validation], timeline: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """Rows sorted: validated passes, then unvalidated passes, then failures; cheapest first."""
    rows = [_row(spec, demand, c, vals.get(c.candidate), timeline) for c in caps]
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    if df.empty:
        return df
    tier = np.where(df["slo_pass"] & df["validated"], 0, np.where(df["slo_pass"], 1, 2))
    df = df.assign(_tier=tier, _cost=df["cost_per_hour"].fillna(np.inf), _hr=-df["headroom_pct"].fillna(0))
    df = df.sort_values(["_tier", "_cost", "_hr", "gpu", "tp", "shape"], kind="stable")
    return df.drop(columns=["_tier", "_cost", "_hr"]).reset_index(drop=True)
