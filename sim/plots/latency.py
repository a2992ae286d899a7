"""(4) Latency CDFs (TTFT, TPOT, E2E) comparing runs."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from sim.io import fmt
from sim.plots.common import RunInfo, common_info

METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end-to-end latency"))


def time_ticks(lo: float, hi: float, most: int = 7) -> list[float]:
    """Tick positions (seconds) for a log time axis over [lo, hi]: the densest of 1x, 1-3x and
    1-2-5x each decade that gives at most ``most`` ticks; a span under one decade that holds
    fewer than two of those gets evenly spaced round numbers instead."""
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    best: list[float] = []
    for mantissas in ((1,), (1, 3), (1, 2, 5)):
        ticks = [m * 10.0**d for d in decades for m in mantissas if lo <= m * 10.0**d <= hi]
        if len(ticks) <= most and len(ticks) >= len(best):
            best = ticks
    if len(best) < 2:
        best = [float(t) for t in MaxNLocator(4).tick_values(lo, hi) if lo <= t <= hi]
    return best


def slo_lines(slo: Sequence[tuple[str, str, float]]) -> dict[str, list[tuple[float, float]]]:
    """``ttft_p99_s<=0.5`` (sim.plots.heatmap.parse_slo) -> {"ttft_s": [(0.99, 0.5)]}."""
    out: dict[str, list[tuple[float, float]]] = {}
    for metric, _op, value in slo:
        m = re.fullmatch(r"(ttft|tpot|e2e)_p(\d+)_s", metric)
        if m:
            out.setdefault(f"{m.group(1)}_s", []).append((int(m.group(2)) / 100, value))
    return out


def latency_cdfs(runs: Sequence[tuple[RunInfo, pd.DataFrame]], *, slo: Sequence[tuple[str, str, float]] = (),
                 tail: bool = False) -> Figure:
    """Empirical CDFs of finished requests' latencies, one line per run (log time axis whose
    ticks carry their unit: 10.0 ms, 1.00 s, 16.7 min). ``tail`` plots the share of requests
    slower than x on a log scale instead, where p99 and p99.9 are readable; each ``slo`` target
    (``ttft_p99_s<=0.5``) is drawn at its threshold and quantile."""
    lines = slo_lines(slo)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, (col, name) in zip(axes, METRICS, strict=True):
        lo, hi = math.inf, 0.0
        for info, req in runs:
            v = np.sort(req.loc[req["status"] == "finished", col].dropna().to_numpy())
            v = v[v > 0]
            if len(v):
                lo, hi = min(lo, float(v[0])), max(hi, float(v[-1]))
                share = np.arange(1, len(v) + 1) / len(v)
                y = np.maximum(1 - share + 1 / len(v), 1e-4) if tail else share
                ax.step(v, y, where="post", label=f"{info.label} (p99 {fmt.duration(float(np.percentile(v, 99)))})")
        for q, seconds in lines.get(col, []):
            ax.axvline(seconds, color="tab:red", ls="--", label=f"SLO p{100 * q:g} <= {fmt.duration(seconds)}")
            ax.axhline(1 - q if tail else q, color="tab:red", ls=":", alpha=0.6)
            lo, hi = min(lo, seconds), max(hi, seconds)
        if tail:
            ax.set(xscale="log", yscale="log", xlabel=f"{name} (log scale)", ylabel="share of requests slower",
                   ylim=(1e-4, 1.05), title=f"{name} tail (1 - CDF)")
        else:
            ax.set(xscale="log", xlabel=f"{name} (log scale)", ylabel="fraction of requests",
                   ylim=(0, 1.01), title=f"{name} CDF")
        if hi > 0:
            lo, hi = (lo / 1.5, hi * 1.5) if hi / lo < 1.5 else (lo / 1.1, hi * 1.1)  # lines off the frame
            ax.set_xlim(lo, hi)
            ticks = time_ticks(lo, hi)
            ax.set_xticks(ticks, [fmt.duration(t) for t in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left" if tail else "lower right")
    fig.suptitle(common_info([i for i, _ in runs]).title("Latency CDFs by config"), fontsize=10)
    fig.tight_layout()
    return fig
