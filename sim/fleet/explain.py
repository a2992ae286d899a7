"""Plans that explain themselves: why a candidate cannot pass at any load, which cost model each
candidate's numbers come from, and when an uncalibrated spec-sheet number decides the ranking.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sim.cluster.slo import Slo
from sim.cost import basis_of
from sim.errors import ConfigError
from sim.fleet.binding import HELPS
from sim.fleet.candidate import Candidate
from sim.fleet.capacity import CapacityEstimate, Probe
from sim.io import fmt
from sim.model.catalog import resolve_model
from sim.run.build import build

INFEASIBLE = "infeasible at any load"
SOFT_BASES = ("uncalibrated", "extrapolated")   # step times not measured on this GPU x TP


def tp_refusal(model: str, tp: int) -> str:
    """Why vLLM refuses ``--tp`` for ``model`` (the check ``sim.memory.budget`` makes in simulate), or ""."""
    spec = resolve_model(model)
    if spec.is_mla or spec.kv_heads % tp == 0 or tp % spec.kv_heads == 0:
        return ""
    return f"--tp {tp}: must divide or be a multiple of {spec.name}'s {spec.kv_heads} KV heads"


def lowest_probe(cap: CapacityEstimate) -> Probe | None:
    """The probe at the lowest load, the best-placed one if several seeds probed it."""
    probes = [p for s in cap.seeds for p in s.probes]
    if not probes:
        return None
    q = min(p.qps for p in probes)
    return min((p for p in probes if p.qps == q), key=lambda p: (p.ttft_p99, p.tpot_p99))


def infeasible_note(cap: CapacityEstimate, slo: Slo) -> str:
    """For a candidate with no passing probe: the latency at the lowest probed load, the
    failing targets, and the knobs that would help (sim.fleet.binding.HELPS); else ""."""
    if cap.feasible or cap.error:
        return ""
    p = lowest_probe(cap)
    if p is None:
        return ""
    seen = [f"{t.metric.upper()} p{round(100 * t.quantile)} {fmt.duration(v)} (SLO <= {fmt.duration(t.seconds)})"
            for t, v in p.observed] or [f"TTFT p99 {fmt.duration(p.ttft_p99)}, TPOT p99 {fmt.duration(p.tpot_p99)}"]
    failing = sorted({f for s in cap.seeds if s.above is not None for f in s.above.failing})
    helps = HELPS.get(cap.binding, "")
    return (f"{INFEASIBLE}: even at {fmt.num(p.qps)} QPS (the lowest probed): {', '.join(seen)}; fails "
            f"{', '.join(failing) or slo.describe()}" + (f"; would help: {helps}" if helps else ""))


def cost_model_of(cand: Candidate, base: dict[str, Any]) -> tuple[str, str]:
    """(cost model name, basis: fitted / extrapolated / uncalibrated / exact) of one candidate."""
    try:
        cost = build(cand.config(base)).cost
    except ConfigError:
        return "-", "-"
    return cost.name, basis_of(cost).basis


def ranking_caveat(table: pd.DataFrame) -> str:
    """A warning when the order of the recommended row and the runner-up (another GPU or TP)
    rests on step times not measured there, and nothing shows it holds; else "".

    With a known error band (``cost_per_hour_pessimistic``, sim/fleet/band.py) the order holds
    when #1 at the pessimistic edge still costs less than #2; without one it cannot be told.
    """
    ok = table[table["slo_pass"].astype(bool)]
    if len(ok) < 2 or "cost_basis" not in ok:
        return ""
    a, b = ok.iloc[0], ok.iloc[1]
    if (a["gpu"], a["tp"]) == (b["gpu"], b["tp"]):
        return ""
    soft = [r for r in (a, b) if r["cost_basis"] in SOFT_BASES]
    if not soft:
        return ""
    edge = float(a.get("cost_per_hour_pessimistic", math.nan))
    if math.isfinite(edge) and edge < b["cost_per_hour"]:
        return ""  # #1 stays cheaper even with its steps as slow as the band allows
    how = {"uncalibrated": "an analytic roofline of spec-sheet numbers (memory bandwidth, peak FLOPs, "
                           "interconnect) with guessed efficiencies",
           "extrapolated": "measurements of another GPU or TP scaled by spec-sheet ratios"}
    which = "; ".join(f"{r['gpu']} TP{r['tp']}: {how[r['cost_basis']]}" for r in soft)
    gap = 100 * (b["cost_per_hour"] / a["cost_per_hour"] - 1) if a["cost_per_hour"] > 0 else math.nan
    band = ("its pessimistic band edge would reverse the order" if math.isfinite(edge)
            else "no error band is known to show the order holds")
    return (f"**Caveat:** #1 ({a['gpu']} TP{a['tp']}) is {gap:.0f}% cheaper than #2 ({b['gpu']} TP{b['tp']}), but "
            f"their step times are not measured ({which}) and {band}. Measure the GPU (calibration/) before "
            "buying on this ranking.")
