"""plan.md's disaggregation section: where xPyD splits win over unified replicas, and why.

Read off the measured candidates only (no new simulation): per GPU x TP, the best unified
replica against the best xPyD group by **requests per GPU-dollar** at capacity (one unit's
capacity x 3600 / (its GPUs x $/GPU-hour)), the fleet each needs for this plan's demand, and
the binding constraint of each (:mod:`sim.fleet.binding`), then every candidate's TTFT
breakdown (:mod:`sim.fleet.breakdown`), busy share per role and link utilisation.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sim.fleet.binding import LABELS
from sim.fleet.breakdown import PARTS
from sim.fleet.planner import Plan


def unit_text(row: pd.Series) -> tuple[str, str, int]:
    """(what one unit of ``row`` is, its noun, GPUs per unit), e.g.
    ("h100 (TP=1, defaults)", "replica", 1) or ("1P3D group of h100 (TP=1, kv-aware, defaults)", "xPyD group", 4)."""
    tp, shape = int(row["tp"]), str(row.get("shape", "unified"))
    per_unit = int(row.get("gpus_per_unit", tp))
    if shape == "unified":
        return f"{row['gpu']} (TP={tp}, {row['knobs']})", "replica", per_unit
    return f"{shape} group of {row['gpu']} (TP={tp}, {row['router']}, {row['knobs']})", "xPyD group", per_unit


def unit_suffix(row: pd.Series) -> str:
    """`` 1P3D (kv-aware)`` for an xPyD row, "" for a unified one."""
    shape = str(row.get("shape", "unified"))
    return "" if shape == "unified" else f" {shape} ({row.get('router', '')})"


def _num(v: Any, fmt: str) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    return format(f, fmt) if math.isfinite(f) else "-"


def _pct(v: Any) -> str:
    s = _num(100 * float(v) if v is not None and v is not pd.NA else math.nan, ".0f")
    return s + "%" if s != "-" else s


def _verdict(gpu: str, tp: int, u: pd.Series | None, x: pd.Series | None) -> str:
    def one(r: pd.Series) -> str:
        lab = str(r["binding_constraint"])
        ok = "meets the SLO" if r["slo_pass"] else "does not meet the SLO"
        return (f"{r['shape']} ({r['router']}): {_num(r['requests_per_gpu_dollar'], ',.0f')} requests per GPU-dollar, "
                f"{int(r['replicas'])} units = {int(r['gpus'])} GPUs ${_num(r['cost_per_hour'], ',.2f')}/h for this "
                f"demand ({ok}); binds on `{lab}`")
    if u is None or x is None:
        have = one(u if u is not None else x) if (u is not None or x is not None) else "no feasible candidate"
        return f"- **{gpu} TP{tp}**: only one kind is feasible at any load: {have}."
    ru, rx = float(u["requests_per_gpu_dollar"]), float(x["requests_per_gpu_dollar"])
    wins = "xPyD" if rx > ru else "unified"
    gap = 100 * (max(ru, rx) / min(ru, rx) - 1) if min(ru, rx) > 0 else math.inf
    why = (f" Disaggregation is held back by `{x['binding_constraint']}`."
           if wins == "unified" else f" Unified is held back by `{u['binding_constraint']}`.")
    return (f"- **{gpu} TP{tp}: {wins} wins** by {_num(gap, '.0f')}% per GPU-dollar. Best unified {one(u)}. "
            f"Best xPyD {one(x)}.{why}")


def _best(rows: pd.DataFrame) -> pd.Series | None:
    ok = rows[rows["max_qps_per_replica"] > 0]
    return None if ok.empty else ok.loc[ok["requests_per_gpu_dollar"].idxmax()]


def breakdown_table(t: pd.DataFrame) -> list[str]:
    head = ["#", "GPU", "TP", "unit", "router", "QPS/unit", "req/GPU-$", *(f"TTFT {p}" for p in PARTS),
            "TTFT mean", "busy unified", "busy prefill", "busy decode", "link util", "blocked pulls/1k", "binding"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, r in t.iterrows():
        cells = [str(int(i) + 1), str(r["gpu"]), str(r["tp"]), str(r["shape"]), str(r["router"]),  # type: ignore[call-overload]
                 _num(r["max_qps_per_replica"], ".2f"), _num(r["requests_per_gpu_dollar"], ",.0f"),
                 *(_num(r[f"ttft_{p}"], ".3f") for p in PARTS), _num(r["ttft_mean"], ".3f"),
                 *(_pct(r[f"busy_{k}"]) for k in ("unified", "prefill", "decode")), _pct(r["link_util"]),
                 _num(r["kv_blocked_per_1k"], ".1f"), str(r["binding_constraint"])]
        out.append("| " + " | ".join(cells) + " |")
    return out


def disagg_section(plan: Plan) -> list[str]:
    """The section's lines ([] when the plan searched no xPyD split)."""
    t = plan.table
    if t.empty or "shape" not in t or not (t["shape"] != "unified").any():
        return []
    lines = ["## Disaggregation: where xPyD wins and where it does not", "",
             f"Under this plan's SLO ({plan.spec.slo.describe()}), per GPU x TP: the best unified replica against "
             "the best xPyD group (over the searched ratios and routers), by requests per GPU-dollar at capacity "
             "(one unit's QPS x 3600 / (its GPUs x $/GPU-hour)). Another SLO can reverse the verdict: rerun with it.", ""]
    for (gpu, tp), rows in t.groupby(["gpu", "tp"], sort=False):
        lines.append(_verdict(str(gpu), int(tp), _best(rows[rows["shape"] == "unified"]),  # type: ignore[call-overload]
                              _best(rows[rows["shape"] != "unified"])))
    ok = t[t["slo_pass"].astype(bool)]
    bu, bx = (ok[ok["shape"] == "unified"], ok[ok["shape"] != "unified"])
    if len(bu) and len(bx):
        u, x = bu.iloc[0], bx.iloc[0]
        lines += ["", f"For this demand the cheapest passing fleet is **{'xPyD' if x['cost_per_hour'] < u['cost_per_hour'] else 'unified'}**: "
                  f"{unit_text(x)[0]} x {int(x['replicas'])} at ${_num(x['cost_per_hour'], ',.2f')}/h vs "
                  f"{unit_text(u)[0]} x {int(u['replicas'])} at ${_num(u['cost_per_hour'], ',.2f')}/h."]
    lines += ["", "TTFT breakdown (mean seconds over one unit's finished requests at capacity; the parts sum to the "
              "mean TTFT), busy share of each role's instances, busiest link, pulls that waited for decode blocks "
              "(per 1k requests):", "", *breakdown_table(t), ""]
    used = [b for b in ("link-bandwidth", "decode-kv-receive") if b in set(t["binding_constraint"])]
    lines += [f"- `{b}` (xPyD): {LABELS[b][0]}." for b in used]
    lines += ["- xPyD caveats: one step-cost model for both roles; link latencies are estimates (links.yaml); "
              "P/D probes run their whole window (no early stop); `replicas` of an xPyD row counts groups.", ""]
    return lines
