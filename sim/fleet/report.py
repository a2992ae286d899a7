"""The plan bundle: inputs, seeds, versions, the table (CSV + Markdown), plots, rerun command."""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sim.errors import ConfigError
from sim.fleet import plots
from sim.fleet.binding import LABELS
from sim.fleet.clients_plan import METHOD, capacity_sentence, demand_line, is_closed, load_text
from sim.fleet.disagg_report import disagg_section, unit_suffix, unit_text
from sim.fleet.explain import INFEASIBLE, SOFT_BASES, lowest_probe, ranking_caveat
from sim.fleet.planner import Plan

MD_COLS = {
    "gpu": "GPU", "tp": "TP", "shape": "unit", "knobs": "knobs", "replicas": "replicas", "gpus": "GPUs",
    "slo_pass": "SLO ok", "attainment_lower": "attain (LCB)", "max_qps_per_replica": "QPS/replica",
    "headroom_pct": "headroom %", "cost_per_hour": "$/h", "cost_per_1m_out_tokens": "$/1M out",
    "cost_per_day": "$/day", "autoscale_cost_per_day": "$/day autoscaled", "kv_util": "KV util",
    "frag_share": "frag", "preempt_per_1k": "preempt/1k", "binding_constraint": "binding",
    "cost_model": "cost model", "cost_basis": "step-time basis", "replicas_pessimistic": "replicas at band edge",
}


NEGATIVE_HEADROOM = (
    "- Negative headroom: the routed replay of the full trace met the SLO with fewer replicas than peak / "
    "per-replica capacity. Capacity is measured one replica at a time on busy windows; behind a router the "
    "replicas share each burst, so the fleet carries more than the sum suggests. The replay decides the size; "
    "headroom compares it with the per-replica arithmetic.")


def _fmt(col: str, v: Any) -> str:
    if v is pd.NA:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return "-"
        if col in ("kv_util", "frag_share"):
            return f"{100 * v:.1f}%"
        if col == "attainment_lower":
            return f"{100 * v:.2f}%"
        if col.startswith("cost") or col == "autoscale_cost_per_day":
            return f"{v:,.2f}"
        return f"{v:.2f}" if abs(float(v)) < 1000 else f"{v:,.0f}"
    return str(v)


def markdown_table(table: pd.DataFrame) -> str:
    cols = [c for c in MD_COLS if c in table.columns]
    xpyd = "shape" in table and bool((table["shape"] != "unified").any())  # a unit is a replica or an xPyD group
    names = {**MD_COLS, **({"replicas": "units", "max_qps_per_replica": "QPS/unit"} if xpyd else {}),
             **({"max_qps_per_replica": "clients/replica"} if "clients" in table and table["clients"].notna().any() else {})}
    lines = ["| # | " + " | ".join(names[c] for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for i, r in table.iterrows():
        cells = [_fmt(c, r[c]) for c in cols]
        if "replicas" in cols and INFEASIBLE in str(r.get("note", "")):
            cells[cols.index("replicas")] = "infeasible"
        if is_closed(r):
            cells[cols.index("max_qps_per_replica")] = (f"{r['max_clients_per_replica']:.0f} ({r['clients_ci_low']:.1f}–"
                                                        f"{r['clients_ci_high']:.1f}); {r['max_qps_per_replica']:.2f} req/s")
        elif c_ci := f"{r['qps_ci_low']:.1f}–{r['qps_ci_high']:.1f}":
            cells[cols.index("max_qps_per_replica")] += f" ({c_ci})"
        lines.append(f"| {int(i) + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _band_edge(b: pd.Series) -> tuple[int, float] | None:
    """(replicas, $/h) at the step-time band's pessimistic edge when that needs more replicas, else None."""
    n_p = b.get("replicas_pessimistic", pd.NA)
    if n_p is pd.NA or n_p is None or "band_pessimistic_pct" not in b or not int(n_p) > int(b["replicas"]):
        return None
    return int(n_p), float(b["cost_per_hour_pessimistic"])


def _band_note(b: pd.Series, sized_for_edge: bool) -> str:
    """What the band means for the one recommendation above (never a second one)."""
    n_p = b.get("replicas_pessimistic", pd.NA)
    if n_p is pd.NA or n_p is None or "band_pessimistic_pct" not in b:
        return ""
    n, tp, pct = int(b["replicas"]), int(b["tp"]), float(b["band_pessimistic_pct"])
    head = (f" Step-time band: the cost model is *{b['cost_basis']}* for {b['gpu']} TP{tp}; its held-out error "
            f"reaches {pct:+.0f}% (steps slower than predicted, 90th percentile).")
    if sized_for_edge:
        return head + (f" The fleet above is sized for that edge ({load_text(b, b['qps_pessimistic'])} per {unit_text(b)[1]}); "
                       f"{_count(n, unit_text(b)[1])} (${b['cost_per_hour']:,.2f}/h) would do only if "
                       "steps are as fast as predicted.")
    if int(n_p) == 0:
        return head + " At that edge no load meets the SLO: treat this size as unproven."
    return head + f" At that edge the size holds: {_count(n, unit_text(b)[1])} either way."


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def recommendation(plan: Plan) -> str:
    """The plan's one recommendation (sized for the band's pessimistic edge when that is larger)."""
    b = plan.best
    if b is None or not b["slo_pass"]:
        notes = plan.table["note"].astype(str) if len(plan.table) else pd.Series(dtype=str)
        if len(notes) and notes.str.contains(INFEASIBLE).all():
            return ("**No candidate meets the SLO at any load**: each fails even at the lowest load probed; "
                    "the latencies there and what would help are under Notes.")
        return "**No candidate meets the SLO** at this load; see the binding constraints and Notes below."
    edge = _band_edge(b)
    n = edge[0] if edge else int(b["replicas"])
    per_hour = edge[1] if edge else float(b["cost_per_hour"])
    scale = per_hour / float(b["cost_per_hour"]) if b["cost_per_hour"] else 1.0
    what, word, per_unit = unit_text(b)
    return (f"**Recommended: {n} x {what}** = "
            f"{_count(n * per_unit, 'GPU')}, ${per_hour:,.2f}/h, ${scale * b['cost_per_1m_out_tokens']:.3f} per 1M output "
            f"tokens, ${24 * per_hour:,.0f}/day static"
            + ("" if edge or is_closed(b) else f" (${b['autoscale_cost_per_day']:,.0f}/day autoscaled)") + ". "
            + (capacity_sentence(b, word) if is_closed(b) else f"One {word} sustains {b['max_qps_per_replica']:.1f} QPS "
               f"within the SLO (95% CI {b['qps_ci_low']:.1f}–{b['qps_ci_high']:.1f}); peak demand {b['peak_qps']:.1f} QPS")
            + f"; headroom {b['headroom_pct']:.0f}% at {_count(int(b['replicas']), word)}; binding constraint: "
            f"{b['binding_constraint']}. " + (f"Routed replay of the full trace at {_count(int(b['replicas']), word)}"
                                               if b.get("validated", True) else f"Not validated (Notes); one {word} at capacity")
            + f": attainment {100 * b['attainment']:.2f}% (lower bound {100 * b['attainment_lower']:.2f}%)."
            + _band_note(b, edge is not None))


def serving_stack_line(plan: Plan) -> str:
    """Which serving-stack profile the step times rest on, and the engine version it represents
    (read from the recommended row's cost model, never written here by hand)."""
    from sim.run.build import build

    row = plan.best if plan.best is not None else None
    cands = [c.candidate for c in plan.capacities]
    cand = next((c for c in cands if row is not None and (c.gpu, c.tp, c.knob_text, c.shape)
                 == (row["gpu"], row["tp"], row["knobs"], row.get("shape", "unified"))),
                cands[0] if cands else None)
    if cand is None:
        return ""
    try:
        cost = build(cand.config(dict(plan.spec.base))).cost
    except ConfigError:
        return ""
    cost = getattr(cost, "inner", cost)  # step_time_scale wraps the model
    stack = getattr(cost, "stack", None)
    if stack is None:
        return f"Serving stack: none modelled ({cost.name}: GPU time only, no engine overhead profile)."
    engine = str(getattr(stack, "engine", "") or "") or str(getattr(stack, "description", "") or "unnamed")
    src = f"; fitted on {stack.source}" if getattr(stack, "source", "") else ""
    return f"Serving stack: `{stack.name}` profile, representing {engine}{src}."


def cost_models(table: pd.DataFrame, inputs: dict[str, Any]) -> str:
    """The cost models behind the rows (each row's own is in the table's cost-model column)."""
    names = [n for n in dict.fromkeys(table["cost_model"]) if n != "-"] if "cost_model" in table else []
    kinds = list(dict.fromkeys(str(n).split(" (")[0] for n in names))
    if not kinds:
        return str(inputs.get("cost_model", "?"))
    return f"{', '.join(kinds)} (each row's own, with its GPU, TP and basis, in the cost-model column)"


def notes_section(table: pd.DataFrame) -> list[str]:
    """Per-row notes (infeasibility, failed replays, prices) and the binding labels used."""
    lines = [f"- #{int(i) + 1} {r['gpu']} TP{r['tp']}{unit_suffix(r)}: {r['note']}"
             for i, r in table.iterrows() if str(r["note"])]
    if "headroom_pct" in table and (table["headroom_pct"] < 0).any():
        lines.append(NEGATIVE_HEADROOM)
    used = [b for b in LABELS if b in set(table["binding_constraint"])]
    lines += [f"- `{b}`: {LABELS[b][0]}; would help: {LABELS[b][1]} (rules in `sim/fleet/binding.py`)"
              for b in used]
    return ["## Notes", "", *lines, ""] if lines else []


def best_achievable_rows(plan: Plan) -> list[tuple[str, list[tuple[str, float, float, bool]]]]:
    """Per candidate: (target, quantile at its lowest probed load, threshold, lower bound?)."""
    out = []
    for cap in plan.capacities:
        p = lowest_probe(cap)
        if p is None:
            continue
        label = cap.candidate.label
        out.append((label, [(t.name, v, t.seconds, p.stopped_early) for t, v in p.observed if math.isfinite(v)]))
    return out


def capacity_frame(plan: Plan) -> pd.DataFrame:
    rows = []
    for c in plan.capacities:
        for s in c.seeds:
            for p in s.probes:
                rows.append({"gpu": c.candidate.gpu, "tp": c.candidate.tp, "shape": c.candidate.shape,
                             "knobs": c.candidate.knob_text,
                             "replication": s.rep, "qps": p.qps, "passed": p.passed,
                             "attainment": p.attainment, "attainment_lower": p.attainment_lower,
                             "ttft_p99": p.ttft_p99, "tpot_p99": p.tpot_p99,
                             "stopped_early": p.stopped_early, "wall_s": round(p.wall_s, 3)})
    return pd.DataFrame(rows)


def validation_frame(plan: Plan) -> pd.DataFrame:
    rows = [{"gpu": c.gpu, "tp": c.tp, "shape": c.shape, "knobs": c.knob_text, **t}
            for c, v in plan.validations.items() for t in v.tries]
    return pd.DataFrame(rows)


def write_bundle(plan: Plan, out: Path, inputs: dict[str, Any], command: list[str]) -> dict[str, Path]:
    """Write everything under ``out``; returns the written paths by role."""
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    t = plan.table
    t.to_csv(out / "plan.csv", index=False)
    paths["csv"] = out / "plan.csv"
    capacity_frame(plan).to_csv(out / "capacity_probes.csv", index=False)
    validation_frame(plan).to_csv(out / "validation.csv", index=False)
    if len(t) and not t["slo_pass"].astype(bool).any() and plan.capacities:
        paths["pareto"] = plots.best_achievable(best_achievable_rows(plan), out / "best_achievable.png")
    elif not plan.demand.clients:  # (a closed loop has no demand rate to plot cost against)
        paths["pareto"] = plots.pareto(t, plan.demand.peak_qps, out / "pareto.png")
    b = plan.best
    label = f"{int(b['replicas'])} x {b['gpu']} tp{int(b['tp'])}" if b is not None else ""
    if plan.autoscale is not None and b is not None:
        plan.autoscale.to_csv(out / "autoscale.csv", index=False)
        paths["replicas"] = plots.replicas_over_time(plan.autoscale, int(b["replicas"]), label,
                                                    out / "replicas_over_time.png")
    val = next((v for c, v in plan.validations.items()
                if b is not None and (c.gpu, c.tp, c.knob_text, c.shape) == (b["gpu"], b["tp"], b["knobs"], b["shape"])),
               None)
    if val is not None and val.ttft is not None and val.tpot is not None:
        paths["cdf"] = plots.latency_cdfs(val.ttft, val.tpot, plan.spec.slo, label, out / "latency_cdf.png")
    cmd = shlex.join(command)
    (out / "rerun.sh").write_text(f"#!/bin/sh\n# re-runs this plan (same inputs, seeds and versions give the same table)\n{cmd}\n")
    (out / "inputs.yaml").write_text(yaml.safe_dump(inputs, sort_keys=False))
    paths["md"] = out / "plan.md"
    paths["md"].write_text(_markdown(plan, paths, cmd, inputs))
    return paths


def _markdown(plan: Plan, paths: dict[str, Path], cmd: str, inputs: dict[str, Any]) -> str:
    d, spec = plan.demand, plan.spec
    lines = [
        f"# kvsim plan: {inputs['model']} on {inputs['trace']['path'].split('/')[-1]}", "",
        f"SLO: {spec.slo.describe()} (pass/fail on the one-sided {100 * spec.slo.confidence:.0f}% Wilson lower bound). "
        + (demand_line(d) if d.clients else f"Load: rate x{d.scale:.3g}, mean {d.mean_qps:.2f} QPS, peak "
           f"{d.peak_qps:.2f} QPS (busiest {spec.peak_window_s:g} s).") + f" Router: {spec.router}. N+k: k={spec.n_plus_k}. "
        f"Cost model: {cost_models(plan.table, inputs)}.",
        *([stack] if (stack := serving_stack_line(plan)) else []), "",
        recommendation(plan), "",
        *([caveat, ""] if (caveat := ranking_caveat(plan.table)) else []),
        markdown_table(plan.table), "",
    ]
    ac = plan.autoscale_cost
    if ac is not None:
        lines += [f"**Autoscaling** (reactive, {spec.bucket_s:g} s buckets, cold start {spec.cold_start_s:g} s): "
                  f"${ac.autoscale_cost:,.2f} over the {ac.hours:.2f} h trace vs ${ac.static_cost:,.2f} static peak "
                  f"({100 * ac.saving:.0f}% saved; oracle ${ac.oracle_cost:,.2f}); under-provisioned in "
                  f"{100 * ac.short_share:.0f}% of buckets (cold-start lag).", ""]
    front = "Cost vs QPS" if paths.get("pareto", Path()).name == "pareto.png" else "Best achievable latency vs the SLO"
    for role, title in (("pareto", front), ("replicas", "Replicas over time"), ("cdf", "Latency CDFs")):
        if role in paths:
            lines.append(f"![{title}]({paths[role].name})")
    lines += ["", *disagg_section(plan), *notes_section(plan.table)]
    unverified = sorted({g for c in plan.capacities for g in c.candidate.gpu_names if spec.prices[g].unverified})
    n_win = min(spec.window, len(plan.scaled))
    win = (f"random window of {n_win:,} requests of the scaled trace" if n_win == spec.window else
           f"window of {n_win:,} requests (the whole trace: --window {spec.window:,} is longer)")
    lines += ["", "## Method", "",
              METHOD.format(reps=spec.replications, win=win, seed=spec.seed) if d.clients else
              f"- Per-replica capacity: bisection over the mean arrival rate on {spec.replications} replications, each a "
              f"{win}, thinned to 90% (seed {spec.seed}); "
              "the first 10% of a window is warm-up. Capacity = mean over replications, 95% Student-t CI.",
              f"- Replicas = ceil({'N' if d.clients else 'peak'} / capacity x (1 + headroom)) + k, then a routed replay of the **full** trace through "
              "the fleet (best knobs per GPU x TP) adjusts it: +1 while it fails, -1 once if the smaller fleet passes.",
              "- `validated = no` rows were sized by per-replica math only.",
              "- Costs: $/h = GPUs x $/GPU-hour (" + spec.price_point + " price; an xPyD group with a GPU per role "
              "pays each role's own); $/1M tokens at " + ("the load line's rate." if d.clients else "the mean demand."),
              ]
    if unverified:
        lines.append(f"- **Unverified prices** (recalled, not sourced): {', '.join(unverified)}. Override with --prices.")
    soft = sorted({str(r["shape"]) if " / " in str(r.get("shape", "")) else f"{r['gpu']} TP{r['tp']}"
                   for _, r in plan.table.iterrows() if r.get("cost_basis") in SOFT_BASES})  # a GPU per role: both named
    if soft:
        lines.append(f"- Step costs of {', '.join(soft)} are **not measured** on that GPU x TP (uncalibrated or "
                     "extrapolated cost model): absolute capacities are estimates.")
    lines += ["", "## Rerun", "", "```sh", cmd, "```", "",
              "Inputs, seeds and versions: `inputs.yaml`; probes: `capacity_probes.csv`; replays: `validation.csv`."]
    return "\n".join(lines) + "\n"
