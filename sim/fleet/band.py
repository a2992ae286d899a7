"""The step-time error band in a plan: replicas at the band's pessimistic edge.

The calibrated cost model carries the error it showed on held-out public measurements
(:class:`~sim.cost.batch.CostBasis`.band: measured / predicted - 1 at the 10th and 90th
percentile; wider for GPUs it extrapolates to). For the best knobs of every (GPU, TP) the
planner searches capacity again with every step slowed to the band's pessimistic edge
(``step_time_scale = 1 + band``) and sizes the fleet for that capacity too::

    central      N   = ceil(peak / capacity(steps as predicted))
    pessimistic  N_p = ceil(peak / capacity(steps x (1 + band)))        (N_p >= N)

The plan recommends N_p: the model has under-predicted step times before (roofline by 20-80 %),
and an under-provisioned fleet misses its SLO where an over-provisioned one only costs money.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from sim.cost.batch import CostBasis
from sim.cost.for_config import cost_basis_for
from sim.fleet.candidate import Candidate
from sim.fleet.capacity import CapacityEstimate
from sim.fleet.clients_plan import load_text
from sim.fleet.sizing import size
from sim.fleet.spec import Demand, PlanSpec

Search = Callable[[PlanSpec, list[Candidate]], list[CapacityEstimate]]


@dataclass(frozen=True, slots=True)
class BandEdge:
    candidate: Candidate
    basis: str                 # fitted | extrapolated | uncalibrated | exact
    band: tuple[float, float]  # (optimistic, pessimistic) step-time error, fractions
    qps: float                 # capacity with steps x (1 + pessimistic band)
    replicas: int              # replicas for the peak at that capacity (+ N+k)


def candidate_basis(cand: Candidate, base: dict[str, object]) -> CostBasis:
    """The cost basis of one unit; of an xPyD group, its role with the wider pessimistic band
    (a GPU per role: the two roles' step times rest on different measurements)."""
    roles = ("unified",) if cand.split is None else ("prefill", "decode")
    return max((cost_basis_for(cand.config(dict(base), r)) for r in roles), key=lambda b: b.band[1])


def band_edges(spec: PlanSpec, best: list[CapacityEstimate], demand: Demand,
               search: Search) -> dict[Candidate, BandEdge]:
    """Capacity and replicas at the pessimistic edge for each of ``best`` (feasible ones)."""
    out: dict[Candidate, BandEdge] = {}
    by_factor: dict[float, list[tuple[CapacityEstimate, CostBasis]]] = {}
    for cap in best:
        b = candidate_basis(cap.candidate, spec.base)
        factor = round(1.0 + max(0.0, b.band[1]), 4)
        if factor == 1.0:
            out[cap.candidate] = BandEdge(cap.candidate, b.basis, b.band, cap.qps,
                                          _replicas(demand, cap.qps, spec))
        else:
            by_factor.setdefault(factor, []).append((cap, b))
    for factor, group in sorted(by_factor.items()):
        slowed = dataclasses.replace(spec, base={**spec.base, "step_time_scale": factor})
        for (cap, b), edge in zip(group, search(slowed, [c.candidate for c, _ in group]), strict=True):
            out[cap.candidate] = BandEdge(cap.candidate, b.basis, b.band, edge.qps,
                                          _replicas(demand, edge.qps, spec))
    return out


def _replicas(demand: Demand, qps: float, spec: PlanSpec) -> int:
    n = size(demand.load, qps, spec.headroom)
    return n + spec.n_plus_k if n else 0


def band_columns(table: pd.DataFrame, edges: dict[Candidate, BandEdge], spec: PlanSpec) -> pd.DataFrame:
    """The plan table plus, per row: the cost model's basis and band, and (for the best knobs of
    each GPU x TP) capacity, replicas and $/h at the band's pessimistic edge."""
    if table.empty:
        return table.assign(band_pessimistic_pct=[], qps_pessimistic=[], replicas_pessimistic=[],
                            cost_per_hour_pessimistic=[])
    bases: dict[tuple[str, int], CostBasis] = {}
    rows = []
    for _, r in table.iterrows():
        shape = (str(r["gpu"]), int(r["tp"]))
        if shape not in bases:
            bases[shape] = candidate_basis(Candidate(*shape), spec.base)
        unit = (*shape, r["knobs"], r.get("shape", "unified"))
        edge = next((e for c, e in edges.items() if (c.gpu, c.tp, c.knob_text, c.shape) == unit), None)
        b = bases[shape] if edge is None else CostBasis(edge.basis, "", edge.band)
        n = edge.replicas if edge is not None else pd.NA
        per_unit = int(r.get("gpus_per_unit", r["tp"]))
        rows.append({"cost_basis": b.basis, "band_pessimistic_pct": 100 * b.band[1],
                     "qps_pessimistic": edge.qps if edge is not None else math.nan,
                     "replicas_pessimistic": n,
                     "cost_per_hour_pessimistic": edge.replicas * per_unit * float(r["price_per_gpu_hour"])
                     if edge is not None and edge.replicas else math.nan})
    extra = pd.DataFrame(rows)
    extra["replicas_pessimistic"] = extra["replicas_pessimistic"].astype("Int64")
    if "cost_basis" in table:  # the table names each row's basis already (sim/fleet/table.py)
        extra = extra.drop(columns="cost_basis")
    return pd.concat([table.reset_index(drop=True), extra], axis=1)


def band_sentence(row: pd.Series) -> str:
    """What the plan recommends given the band, for the recommended row ('' without a band)."""
    n_p = row.get("replicas_pessimistic", pd.NA)
    if n_p is pd.NA or "cost_basis" not in row:  # no band-edge search for this row
        return ""
    n, pct, tp = int(row["replicas"]), float(row["band_pessimistic_pct"]), int(row["tp"])
    unit = "replica" if str(row.get("shape", "unified")) == "unified" else "xPyD group"
    per_unit = int(row.get("gpus_per_unit", tp))
    head = (f" **Step-time band:** the cost model is *{row['cost_basis']}* for {row['gpu']} TP{tp}; its "
            f"held-out error reaches {pct:+.0f}% (slower steps than predicted, 90th percentile).")
    if int(n_p) <= n:
        return head + f" At that edge the fleet size holds: **{n} {unit}{'' if n == 1 else 's'} either way**."
    if n_p == 0:
        return head + " At that edge no load meets the SLO: treat this row as unproven."
    return (head + f" At that edge one {unit} sustains {load_text(row, row['qps_pessimistic'])}, so **{int(n_p)} {unit}s "
            f"({int(n_p) * per_unit} GPUs, ${row['cost_per_hour_pessimistic']:,.2f}/h) are recommended**; the central "
            f"estimate above ({n}) holds only if steps are as fast as predicted.")
