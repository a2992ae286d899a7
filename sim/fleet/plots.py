"""The plan's plots: cost vs QPS Pareto chart, replicas over time, latency CDFs (PNG, Agg)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from sim.cluster.slo import Slo


def pareto(table: pd.DataFrame, peak_qps: float, path: Path) -> Path:
    return _save(pareto_figure(table, peak_qps), path)


def replicas_over_time(sched: pd.DataFrame, static_replicas: int, label: str, path: Path) -> Path:
    return _save(replicas_figure(sched, static_replicas, label), path)


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pareto_figure(table: pd.DataFrame, peak_qps: float) -> Figure:
    """$/h to serve a given QPS (step functions, one per GPU x TP x knobs) and their envelope;
    the legend sits beside the axes, never over the lines."""
    fig, ax = plt.subplots(figsize=(10.5, 5))
    rows = table[table["max_qps_per_replica"] > 0]
    qmax = 2.0 * max(peak_qps, 1e-9)
    q = np.linspace(qmax / 400, qmax, 400)
    curves = []
    for _i, r in rows.reset_index(drop=True).iterrows():
        per = r["cost_per_hour"] / r["replicas"] if r["replicas"] else math.nan
        cost = np.ceil(q / r["max_qps_per_replica"] - 1e-9) * per
        curves.append(cost)
        style = dict(alpha=0.9) if r["slo_pass"] else dict(alpha=0.35, color="grey")
        label = f"{r['gpu']} tp{r['tp']}" + ("" if r["knobs"] == "defaults" else f" {r['knobs']}")
        ax.step(q, cost, where="post", label=label + ("" if r["slo_pass"] else " (fails replay)"), **style)
        ax.plot([r["replicas"] * r["max_qps_per_replica"]], [r["cost_per_hour"]], "o",
                color=ax.lines[-1].get_color(), ms=5)
    if curves:
        env = np.nanmin(np.vstack(curves), axis=0)
        ax.plot(q, env, color="black", lw=2.2, label="Pareto frontier (cheapest)")
        ax.fill_between(q, env, np.nanmax(np.vstack(curves)) * 1.05, color="tab:green", alpha=0.06,
                        label="SLO-feasible (at or above frontier)")
    ax.axvline(peak_qps, ls="--", color="tab:red", label=f"peak demand {peak_qps:.1f} QPS")
    ax.set_xlabel("sustained QPS within the SLO (fleet)")
    ax.set_ylabel("$ / hour")
    ax.set_title("Cost vs QPS (per-replica capacity x replicas)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def replicas_figure(sched: pd.DataFrame, static_replicas: int, label: str) -> Figure:
    """Replicas over trace time (whole-number y ticks) with the arrival rate behind."""
    fig, ax = plt.subplots(figsize=(8, 4.8))
    t = sched["t_s"].to_numpy() / 60
    ax.step(t, sched["billed"], where="post", label="autoscaled: billed (incl. cold start)", color="tab:blue")
    ax.step(t, sched["serving"], where="post", label="autoscaled: serving", color="tab:cyan", ls=":")
    ax.step(t, sched["oracle"], where="post", label="oracle (demand known)", color="tab:green", alpha=0.6)
    ax.axhline(static_replicas, color="tab:red", ls="--", label=f"static peak: {static_replicas}")
    ax.set_xlabel("trace time (min)")
    ax.set_ylabel("replicas")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # replicas are whole
    top = max(static_replicas, float(sched[["billed", "serving", "oracle"]].to_numpy().max()))
    ax.set_ylim(0, top + 1)  # the static line is not drawn on the frame
    ax2 = ax.twinx()
    ax2.plot(t, sched["rate"], color="grey", alpha=0.4, lw=1)
    ax2.set_ylabel("arrival rate (req/s)", color="grey")
    ax.set_title(f"Replicas over time: {label}")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # below, off the lines
    fig.tight_layout()
    return fig


def latency_cdfs(ttft: np.ndarray, tpot: np.ndarray, slo: Slo, label: str, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    thr = slo.thresholds()
    for ax, vals, name in ((axes[0], ttft, "ttft"), (axes[1], tpot, "tpot")):
        v = np.sort(vals[np.isfinite(vals)])
        if len(v):
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), color="tab:blue")
            ax.set_xscale("log")
        for t in slo.targets:
            if t.metric == name:
                ax.axvline(t.seconds, color="tab:red", ls="--", label=f"SLO p{round(100 * t.quantile)} <= {t.seconds:g}s")
                ax.axhline(t.quantile, color="tab:red", ls=":", alpha=0.5)
        if name in thr:
            ax.legend(fontsize=7, loc="lower right")
        ax.set_xlabel(f"{name.upper()} (s)")
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Latency CDFs of the chosen fleet (routed replay): {label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
