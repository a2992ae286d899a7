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
from sim.fleet.candidate import KNOBS
from sim.fleet.planner import Plan


def unit_text(row: pd.Series) -> tuple[str, str, int]:
    """(what one unit of ``row`` is, its noun, GPUs per unit), e.g.
    ("h100 (TP=1, defaults)", "replica", 1) or ("1P3D group of h100 (TP=1, kv-aware, defaults)", "xPyD group", 4)."""
    tp, shape = int(row["tp"]), str(row.get("shape", "unified"))
    per_unit = int(row.get("gpus_per_unit", tp))
    if shape == "unified":
        return f"{row['gpu']} (TP={tp}, {row['knobs']})", "replica", per_unit
    if " / " in shape:  # a GPU per role: the shape names both, e.g. "1P3D (h200 TP2 / h100 TP1)"
        return f"{shape} group ({row['router']}, {row['knobs']})", "xPyD group", per_unit
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


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _one(r: pd.Series) -> str:
    """One candidate in a sentence: per GPU-dollar, the fleet for this demand, the binding label."""
    what = ("replica" if r["shape"] == "unified" else f"{r['shape']} behind {r['router']}") + f" ({r['knobs']})"
    ok = "meets the SLO" if r["slo_pass"] else "does not meet the SLO"
    busy = ("" if r["shape"] == "unified" else
            f", prefill {_pct(r['busy_prefill'])} / decode {_pct(r['busy_decode'])} busy, link {_pct(r['link_util'])}")
    return (f"{what}: {_num(r['requests_per_gpu_dollar'], ',.0f')} requests per GPU-dollar{busy}; for this demand "
            f"{_count(int(r['replicas']), 'unit')} = {_count(int(r['gpus']), 'GPU')}, ${_num(r['cost_per_hour'], ',.2f')}/h "
            f"({ok}); binds on `{r['binding_constraint']}`")


def _verdict(gpu: str, tp: int, u: pd.Series | None, x: pd.Series | None) -> str:
    if u is None or x is None:
        have = _one(u if u is not None else x) if (u is not None or x is not None) else "none"
        return f"- **{gpu} TP{tp}**: only one kind passes at some load; {have}."
    ru, rx = float(u["requests_per_gpu_dollar"]), float(x["requests_per_gpu_dollar"])
    xpyd = rx > ru
    gap = 100 * (max(ru, rx) / min(ru, rx) - 1) if min(ru, rx) > 0 else math.inf
    lose = u if xpyd else x
    why = f" The {'unified replica' if xpyd else 'xPyD group'} is held back by `{lose['binding_constraint']}`"
    if not xpyd:
        idle = "prefill" if float(x["busy_prefill"]) < float(x["busy_decode"]) else "decode"
        why += f"; its {idle} instances idle most ({_pct(x[f'busy_{idle}'])} busy), and every GPU is paid for"
    return (f"- **{gpu} TP{tp}: {'xPyD' if xpyd else 'unified'} wins** by {_num(gap, '.0f')}% per GPU-dollar. "
            f"Best unified {_one(u)}. Best xPyD {_one(x)}.{why}.")


def _best(rows: pd.DataFrame) -> pd.Series | None:
    ok = rows[rows["max_qps_per_replica"] > 0]
    return None if ok.empty else ok.loc[ok["requests_per_gpu_dollar"].idxmax()]


def _tuned(plan: Plan) -> list[str]:
    """The sentence that says both sides were tuned alike (the knobs every shape searched)."""
    k = {n: plan.spec.knobs[n] for n in KNOBS if len(plan.spec.knobs.get(n, ())) > 1}
    raised = " Each setting whose batch reached `max_num_seqs` in the run above its capacity was also " \
        "searched at twice the cap (`sim/fleet/tuning.py`)." if plan.spec.raise_seqs else ""
    if not k:
        return ["Every shape ran at one knob setting (shown in each row)." + raised]
    grid = " x ".join(f"`{n}` in {{{', '.join(str(x) for x in v)}}}" for n, v in k.items())
    return [f"Unified replicas and every xPyD split searched the same knobs ({grid}); each side's best "
            "setting is compared, and named in its row." + raised]


def breakdown_table(t: pd.DataFrame) -> list[str]:
    head = ["#", "GPU", "TP", "unit", "router", "knobs", "QPS/unit", "req/GPU-$", *(f"TTFT {p}" for p in PARTS),
            "TTFT mean", "busy unified", "busy prefill", "busy decode", "link util", "blocked pulls/1k", "binding"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, r in t.iterrows():
        cells = [str(int(i) + 1), str(r["gpu"]), str(r["tp"]), str(r["shape"]), str(r["router"]),
                 str(r["knobs"]),
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
             "(one unit's QPS x 3600 / (its GPUs x $/GPU-hour)). Another SLO can reverse the verdict: rerun with it.",
             *_tuned(plan), ""]
    for (gpu, tp), rows in t.groupby(["gpu", "tp"], sort=False):
        lines.append(_verdict(str(gpu), int(tp), _best(rows[rows["shape"] == "unified"]),
                              _best(rows[rows["shape"] != "unified"])))
    ok = t[t["slo_pass"].astype(bool)]
    bu, bx = (ok[ok["shape"] == "unified"], ok[ok["shape"] != "unified"])
    if len(bu) and len(bx):
        u, x = bu.iloc[0], bx.iloc[0]
        win, other = (x, u) if x["cost_per_hour"] < u["cost_per_hour"] else (u, x)
        lines += ["", f"For this demand the cheapest passing fleet is **{'unified' if win is u else 'xPyD'}**: "
                  f"{int(win['replicas'])} x {unit_text(win)[0]} at ${_num(win['cost_per_hour'], ',.2f')}/h, against "
                  f"{int(other['replicas'])} x {unit_text(other)[0]} at ${_num(other['cost_per_hour'], ',.2f')}/h."]
    lines += ["", "TTFT breakdown (mean seconds over one unit's finished requests at capacity; the parts sum to the "
              "mean TTFT), busy share of each role's instances (time stepping at all, not saturation: a decode instance with one running request is busy), busiest link, pulls that waited for decode blocks "
              "(per 1k requests):", "", *breakdown_table(t), ""]
    used = [b for b in ("link-bandwidth", "decode-kv-receive") if b in set(t["binding_constraint"])]
    lines += [f"- `{b}` (xPyD): {LABELS[b][0]}." for b in used]
    lines += ["- xPyD caveats: each role's step times come from its own GPU's cost model (one model family for "
              "both roles); link latencies are estimates (links.yaml); `units` of an xPyD row counts groups.", ""]
    return lines
