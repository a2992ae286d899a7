"""PNG of a trace: prompt and output length histograms and the arrival rate over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def plot_trace(df: pd.DataFrame, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, col in zip(axes[:2], ("prompt_tokens", "output_tokens"), strict=True):
        x = df[col].to_numpy()
        bins = np.logspace(0, np.log10(max(2, x.max())), 60)
        ax.hist(x, bins=bins)
        ax.set_xscale("log")
        ax.set_xlabel(col)
        ax.set_ylabel("requests")
    t = df["arrival_s"].to_numpy()
    span = float(t.max() - t.min()) if len(t) else 0.0
    width = 60.0 if span > 600 else 1.0
    counts = np.bincount(((t - t.min()) // width).astype(np.int64)) / width
    axes[2].step(np.arange(len(counts)) * width, counts, where="post")
    axes[2].set_xlabel("time (s)")
    axes[2].set_ylabel(f"arrivals/s ({width:g} s bins)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
