"""(1) KV pool over time, stacked by category; (2) Fig. 2-style time-averaged breakdown bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.plots.common import CATEGORIES, RunInfo


def _binned(steps: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """Duration-weighted means over uniform time bins (a run can have 10^5 steps)."""
    if len(steps) <= max_points:
        return steps.assign(t=steps["start_s"])
    t = steps["start_s"].to_numpy()
    edges = np.linspace(t[0], t[-1] + 1e-9, max_points + 1)
    b = np.clip(np.digitize(t, edges) - 1, 0, max_points - 1)
    w = steps["duration_s"].to_numpy() + 1e-12
    cols = [*CATEGORIES, "num_running", "num_waiting"]
    agg = pd.DataFrame({c: np.bincount(b, steps[c].to_numpy() * w, max_points) for c in cols})
    agg = agg.div(np.bincount(b, w, max_points), axis=0)
    agg["num_preempted"] = np.bincount(b, steps["num_preempted"].to_numpy(), max_points)
    agg["t"] = (edges[:-1] + edges[1:]) / 2
    return agg.ffill().dropna()


def memory_over_time(steps: pd.DataFrame, info: RunInfo, *, max_points: int = 1500) -> Figure:
    """Stacked shares of the KV pool vs time, with running/waiting counts and preemptions."""
    d = _binned(steps, max_points)
    pool = d[list(CATEGORIES)].sum(axis=1).to_numpy()
    fig, ax = plt.subplots(figsize=(11, 5))
    ax.stackplot(d["t"], *(100 * d[c].to_numpy() / pool for c in CATEGORIES),
                 labels=[lab for lab, _ in CATEGORIES.values()],
                 colors=[col for _, col in CATEGORIES.values()], alpha=0.9)
    ax.set(xlabel="simulated time (s)", ylabel="share of the KV pool (%)", ylim=(0, 100),
           xlim=(d["t"].min(), d["t"].max()))
    ax2 = ax.twinx()
    ax2.plot(d["t"], d["num_running"], color="black", lw=1.0, label="running requests")
    ax2.plot(d["t"], d["num_waiting"], color="#1971c2", lw=1.0, ls="--", label="waiting requests")
    pre = d[d["num_preempted"] > 0]
    ymax = max(float(d["num_running"].max()), float(d["num_waiting"].max()), 1.0)
    ax2.scatter(pre["t"], np.full(len(pre), ymax * 1.02), marker="v", color="#c92a2a", s=18,
                label=f"preemptions ({int(steps['num_preempted'].sum())} total)", zorder=5)
    ax2.set(ylabel="requests (count)", ylim=(0, ymax * 1.08))
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1[::-1] + h2, l1[::-1] + l2, loc="upper left", bbox_to_anchor=(1.07, 1.0), fontsize=8)
    ax.set_title(info.title(f"KV cache memory over time ({info.label})"), fontsize=10)
    return fig


def breakdown_bars(entries: Sequence[tuple[str, Mapping[str, float]]], info: RunInfo,
                   *, what: str = "Time-averaged KV memory by category") -> Figure:
    """One stacked bar per config; ``entries`` = (label, {category: share in [0, 1]})."""
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(entries) + 3), 5))
    x = np.arange(len(entries))
    bottom = np.zeros(len(entries))
    for col, (lab, colour) in CATEGORIES.items():
        key = col.removesuffix("_slots")
        vals = np.array([100 * float(e[1].get(key, 0.0)) for e in entries])
        ax.bar(x, vals, bottom=bottom, color=colour, label=lab, edgecolor="white", width=0.6)
        for xi, v, b in zip(x, vals, bottom, strict=True):
            if v >= 3:
                ax.text(float(xi), b + v / 2, f"{v:.1f}%", ha="center", va="center", fontsize=8)
        bottom += vals
    ax.set_xticks(x, [e[0] for e in entries], rotation=20 if len(entries) > 4 else 0, ha="right" if len(entries) > 4 else "center")
    ax.set(ylabel="share of the KV pool, time-averaged (%)", ylim=(0, 100))
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], names[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(info.title(what), fontsize=10)
    return fig
