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
        label = f"{r['gpu']} tp{r['tp']}" + ("" if r.get("shape", "unified") == "unified" else f" {r['shape']}")
        label += "" if r["knobs"] == "defaults" else f" {r['knobs']}"
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
    return _save(latency_figure(ttft, tpot, slo, label), path)


def latency_figure(ttft: np.ndarray, tpot: np.ndarray, slo: Slo, label: str) -> Figure:
    """Per metric: the CDF (ms) and its tail (share of requests slower than x, log scale down to
    1 in 10,000), with each SLO target drawn where it is judged: its threshold and its quantile."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), squeeze=False)
    for col, (vals, name) in enumerate(((ttft, "ttft"), (tpot, "tpot"))):
        v = np.sort(vals[np.isfinite(vals)]) * 1e3
        cdf, tail = axes[0][col], axes[1][col]
        if len(v):
            share = np.arange(1, len(v) + 1) / len(v)
            cdf.plot(v, share, color="tab:blue")
            tail.plot(v, np.maximum(1 - share + 1 / len(v), 1e-4), color="tab:blue", drawstyle="steps-post")
            cdf.set_xscale("log")
            tail.set_xscale("log")
        tail.set_yscale("log")
        tail.set_ylim(1e-4, 1.05)
        for t in slo.targets:
            if t.metric != name:
                continue
            q = round(100 * t.quantile)
            seen = float(np.quantile(v, t.quantile)) if len(v) else math.nan
            for ax in (cdf, tail):
                ax.axvline(t.seconds * 1e3, color="tab:red", ls="--",
                           label=f"SLO p{q} <= {t.seconds * 1e3:g} ms" if ax is cdf else None)
            cdf.axhline(t.quantile, color="tab:red", ls=":", alpha=0.5)
            tail.axhline(1 - t.quantile, color="tab:red", ls=":", alpha=0.5,
                         label=f"{100 - q}% of requests may be slower")
            if math.isfinite(seen):
                tail.plot([seen], [1 - t.quantile], "o", color="black", label=f"p{q} here: {seen:,.1f} ms")
        for ax, ylabel in ((cdf, "share of requests <= x"), (tail, "share of requests > x (tail)")):
            ax.set_xlabel(f"{name.upper()} (ms)")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3, which="both")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="lower right" if ax is cdf else "lower left")
    fig.suptitle(f"Latency of the chosen fleet (routed replay): {label}", fontsize=10)
    fig.tight_layout()
    return fig


def best_achievable(rows: list[tuple[str, list[tuple[str, float, float, bool]]]], path: Path) -> Path:
    return _save(best_achievable_figure(rows), path)


def best_achievable_figure(rows: list[tuple[str, list[tuple[str, float, float, bool]]]]) -> Figure:
    """When no candidate meets the SLO at any load there is no Pareto front: per candidate and SLO
    target, the quantile seen at the lowest probed load (hatched: a lower bound, probe stopped
    early) against the target, so how far each is from passing is visible."""
    targets = list(dict.fromkeys(name for _, obs in rows for name, _, _, _ in obs))
    fig, axes = plt.subplots(1, max(len(targets), 1), figsize=(5 * max(len(targets), 1), 4.2), squeeze=False)
    for ax, target in zip(axes[0], targets, strict=False):
        labels: list[str] = []
        seen: list[float] = []
        bound: list[bool] = []
        limit = math.nan
        for label, obs in rows:
            for name, v, thr, lower in obs:
                if name == target:
                    labels.append(label)
                    seen.append(v * 1e3)
                    bound.append(lower)
                    limit = thr * 1e3
        bars = ax.bar(range(len(seen)), seen, color="tab:grey")
        for b, lower in zip(bars, bound, strict=True):
            if lower:
                b.set_hatch("//")
        ax.axhline(limit, color="tab:red", ls="--", label=f"SLO {limit:g} ms")
        ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("ms at the lowest probed load")
        ax.set_title(target)
        ax.legend(fontsize=7)
    fig.suptitle("No candidate meets the SLO at any load: best achievable latency vs the SLO "
                 "(hatched = lower bound, probe stopped early)", fontsize=10)
    fig.tight_layout()
    return fig
