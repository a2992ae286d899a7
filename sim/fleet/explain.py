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
_TRUST = ("exact", "fitted", "extrapolated", "uncalibrated")   # most measured first


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
    """For a candidate with no passing probe: the latency at the lowest probed load, every
    failing target, and the knobs that would help (sim.fleet.binding.HELPS); else "".

    A probe the SLO monitor stopped early saw only the requests that finished by then, so its
    quantiles are lower bounds: they are labelled so, never shown as a run's result. A target
    is failing when the monitor said so or its observed quantile (even a lower bound) is above it.
    """
    if cap.feasible or cap.error:
        return ""
    p = lowest_probe(cap)
    if p is None:
        return ""
    bound = " (lower bound, probe stopped early)" if p.stopped_early else ""
    seen = [f"{t.metric.upper()} p{round(100 * t.quantile)} {'>= ' if bound else ''}{fmt.duration(v)}"
            f" (SLO <= {fmt.duration(t.seconds)})" for t, v in p.observed]
    if not seen:
        seen = [f"TTFT p99 {fmt.duration(p.ttft_p99)}, TPOT p99 {fmt.duration(p.tpot_p99)}"]
    failing = {f for s in cap.seeds if s.above is not None for f in s.above.failing}
    failing |= {t.name for t, v in p.observed if math.isfinite(v) and v > t.seconds}
    helps = HELPS.get(cap.binding, "")
    return (f"{INFEASIBLE}: even at {fmt.num(p.qps)} QPS (the lowest probed): {', '.join(seen)}{bound}; fails "
            f"{', '.join(sorted(failing)) or slo.describe()}" + (f"; would help: {helps}" if helps else ""))


def cost_model_of(cand: Candidate, base: dict[str, Any]) -> tuple[str, str]:
    """(cost model name, basis: fitted / extrapolated / uncalibrated / exact) of one candidate;
    of an xPyD group whose roles differ (a GPU per role), ``prefill / decode`` names and the
    least measured of the two bases (what the step times of the group rest on at worst)."""
    roles = ("unified",) if cand.split is None else ("prefill", "decode")
    try:
        costs = [build(cand.config(base, r)).cost for r in roles]
    except ConfigError:
        return "-", "-"
    names = list(dict.fromkeys(c.name for c in costs))
    bases = [basis_of(c).basis for c in costs]
    return " / ".join(names), max(bases, key=lambda b: _TRUST.index(b) if b in _TRUST else len(_TRUST))


def _cost(row: pd.Series, col: str) -> float:
    v = row.get(col, math.nan)
    return float(v) if v is not None and v is not pd.NA and math.isfinite(float(v)) else math.nan


def ranking_caveat(table: pd.DataFrame) -> str:
    """A warning when the order of the recommended row and the runner-up (another GPU or TP)
    rests on step times not measured there and may not hold; else "".

    Like is compared with like: with both rows' pessimistic band edges known
    (``cost_per_hour_pessimistic``, sim/fleet/band.py) the order reverses only when #1 costs more
    than #2 at their edges. With only #1's edge known, #2's central cost is a floor of its edge
    (a fleet only grows with slower steps), so #1's edge below it shows the order holds. Without
    a band it cannot be told.
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
    a_p, b_p = _cost(a, "cost_per_hour_pessimistic"), _cost(b, "cost_per_hour_pessimistic")
    if math.isfinite(a_p) and math.isfinite(b_p):
        if a_p <= b_p:
            return ""  # at both pessimistic edges #1 still costs no more
        why = (f"at both pessimistic band edges #2 costs less (${b_p:,.2f}/h vs ${a_p:,.2f}/h): "
               "the order reverses there")
    elif math.isfinite(a_p):
        if a_p <= float(b["cost_per_hour"]):
            return ""  # #1 at its edge is below #2's central cost, which #2's edge can only exceed
        why = "#2 has no band-edge search, so whether the order holds at the edges cannot be told"
    else:
        why = "no error band is known to show the order holds"
    how = {"uncalibrated": "an analytic roofline of spec-sheet numbers (memory bandwidth, peak FLOPs, "
                           "interconnect) with guessed efficiencies",
           "extrapolated": "measurements of another GPU or TP scaled by spec-sheet ratios"}
    which = "; ".join(f"{r['gpu']} TP{r['tp']}: {how[r['cost_basis']]}" for r in soft)
    gap = 100 * (b["cost_per_hour"] / a["cost_per_hour"] - 1) if a["cost_per_hour"] > 0 else math.nan
    return (f"**Caveat:** at the central estimate #1 ({a['gpu']} TP{a['tp']}) is {gap:.0f}% cheaper than #2 "
            f"({b['gpu']} TP{b['tp']}), but their step times are not measured ({which}) and {why}. Measure the "
            "GPU (calibration/) before buying on this ranking.")
