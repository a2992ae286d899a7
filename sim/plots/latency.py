"""(4) Latency CDFs (TTFT, TPOT, E2E) comparing runs."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.plots.common import RunInfo, common_info

METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end-to-end latency"))


def latency_cdfs(runs: Sequence[tuple[RunInfo, pd.DataFrame]]) -> Figure:
    """Empirical CDFs of finished requests' latencies, one line per run (x in ms, log scale)."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, (col, name) in zip(axes, METRICS, strict=True):
        for info, req in runs:
            v = np.sort(req.loc[req["status"] == "finished", col].dropna().to_numpy()) * 1e3
            v = v[v > 0]
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post",
                        label=f"{info.label} (p99 {np.percentile(v, 99):.0f} ms)")
        ax.set(xscale="log", xlabel=f"{name} (ms, log scale)", ylabel="fraction of requests",
               ylim=(0, 1.01), title=f"{name} CDF")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(common_info([i for i, _ in runs]).title("Latency CDFs by config"), fontsize=10)
    fig.tight_layout()
    return fig
