"""The plan's table on the terminal, and the closed-loop options a plan takes."""

from __future__ import annotations

import math

import pandas as pd
from rich.table import Table

from sim.config.vllm_bench import VllmBench
from sim.fleet.explain import INFEASIBLE
from sim.fleet.planner import Plan
from sim.run.clients import ClientSpec
from workloads.load import Load


def closed_clients(flag: int | None, bench: VllmBench | None, load: Load) -> tuple[int | None, float | None]:
    """(N of ``--max-concurrency``: the flag, else a pasted bench line's; None: open loop, and
    the finite ``--request-rate`` its clients also keep to, as vLLM's do; None: back to back)."""
    n = ClientSpec(flag if flag is not None else bench.max_concurrency if bench is not None else None).max_concurrency
    if n is None:
        return None, None
    rate = load.request_rate
    return n, rate if rate is not None and not math.isinf(rate) else None


def rich_table(plan: Plan) -> Table:
    d = plan.demand
    rate = "" if d.mean_qps != d.mean_qps else f", {d.mean_qps:.1f} req/s"
    load = f"{d.clients} clients (closed loop{rate})" if d.clients else f"peak {d.peak_qps:.1f} QPS (mean {d.mean_qps:.1f})"
    t = Table(title=f"kvsim plan | {load} | {plan.spec.slo.describe()}")
    widest = max((len(k) for v in plan.table.get("knobs", ()) for k in str(v).split()), default=8)
    unit = "unit" if "shape" in plan.table and (plan.table["shape"] != "unified").any() else "replica"  # xPyD: groups
    for c, j in (("#", "right"), ("GPU", "left"), ("TP", "right"), ("unit", "left"), ("knobs", "left"),
                 (f"{unit}s (GPUs) [band edge]", "right"), ("SLO", "center"),
                 ("attain LCB", "right"), (f"{'clients' if d.clients else 'QPS'}/{unit} (95% CI)", "right"), ("headroom", "right"),
                 ("$/h", "right"), ("$/1M out", "right"), ("$/day", "right"), ("KV util", "right"),
                 ("preempt/1k", "right"), ("binding", "left")):
        # knobs: one per line, each whole (a cut "max_num_batched_tokens=2…" hid the value)
        t.add_column(c, justify=j, min_width=widest if c == "knobs" else None)  # type: ignore[arg-type]
    for i, r in plan.table.iterrows():
        ok = bool(r["slo_pass"])
        price_flag = "*" if r["price_unverified"] else ""
        t.add_row(
            str(int(i) + 1), str(r["gpu"]), str(r["tp"]), "unified" if r.get("shape", "unified") == "unified" else f"{r['shape']} {r['router']}",
            str(r["knobs"]).replace(" ", "\n"),
            "infeasible" if INFEASIBLE in str(r["note"]) else f"{r['replicas']} ({r['gpus']})"
            + (f" [{r['replicas_pessimistic']}]" if r.get("replicas_pessimistic", pd.NA) is not pd.NA else ""),
            ("yes" if r["validated"] else "yes (math)") if ok else "no",
            f"{100 * r['attainment_lower']:.2f}%" if r["attainment_lower"] == r["attainment_lower"] else "-",
            _capacity(r, bool(d.clients)),
            (f"{r['headroom_pct']:.0f}%" + ("*" if r["headroom_pct"] < 0 else "")) if r["headroom_pct"] == r["headroom_pct"] else "-",
            f"{r['cost_per_hour']:,.2f}{price_flag}" if r["cost_per_hour"] == r["cost_per_hour"] else "-",
            f"{r['cost_per_1m_out_tokens']:.3f}" if r["cost_per_1m_out_tokens"] == r["cost_per_1m_out_tokens"] else "-",
            f"{r['cost_per_day']:,.0f}" if r["cost_per_day"] == r["cost_per_day"] else "-",
            f"{100 * r['kv_util']:.0f}%" if r["kv_util"] == r["kv_util"] else "-",
            f"{r['preempt_per_1k']:.1f}" if r["preempt_per_1k"] == r["preempt_per_1k"] else "-",
            r["binding_constraint"], style=None if ok else "dim")
    return t


def _capacity(r: pd.Series, closed: bool) -> str:
    """A unit's capacity and its CI: QPS, or whole clients (and the rate served there)."""
    if not closed:
        return f"{r['max_qps_per_replica']:.1f} ({r['qps_ci_low']:.1f}–{r['qps_ci_high']:.1f})"
    if not r["max_clients_per_replica"] > 0:
        return "0"
    return (f"{r['max_clients_per_replica']:.0f} ({r['clients_ci_low']:.1f}–{r['clients_ci_high']:.1f})"
            f"\n{r['max_qps_per_replica']:.2f} req/s")
