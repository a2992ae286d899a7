"""Cluster plots: the TTFT breakdown per request class, and link utilisation over time.

TTFT of a disaggregated request = prefill (queue + prompt on the prefill instance, arrival ->
``prefill_done_s``) + waiting for KV on the decode instance (``kv_wait_s``: blocks to receive
into, then the transfer ``transfer_s``) + the first decode step (KV landed -> first token).
A request prefilled where it decodes (unified, or llm-d's threshold rule) is one bar: TTFT.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

PARTS = (("prefill (queue + prompt)", "#1c7ed6"), ("decode queue (free blocks, next step)", "#f59f00"),
         ("KV transfer", "#e03131"), ("first decode step", "#2b8a3e"))


def ttft_parts(req: pd.DataFrame) -> pd.DataFrame:
    """Per finished request: the four TTFT parts (seconds; NaN parts are 0 for local prefill)."""
    done = req[req["status"] == "finished"]
    remote = done["prefill_instance"] >= 0 if "prefill_instance" in done else pd.Series(False, index=done.index)
    pre = np.where(remote, done.get("prefill_done_s", np.nan) - done["arrival_s"], done["ttft_s"])
    xfer = np.where(remote, done.get("transfer_s", 0.0), 0.0)
    wait = np.where(remote, done.get("kv_wait_s", 0.0) - xfer, 0.0)
    first = np.where(remote, done["ttft_s"] - pre - wait - xfer, 0.0)
    out = pd.DataFrame({PARTS[0][0]: pre, PARTS[1][0]: wait, PARTS[2][0]: xfer, PARTS[3][0]: first},
                       index=done.index)
    return out.fillna(0.0)


def ttft_breakdown(req: pd.DataFrame, title: str = "TTFT breakdown") -> Figure:
    """Stacked bars: mean and p99-TTFT request's parts, for remote and local prefills."""
    parts = ttft_parts(req)
    remote = (req.loc[parts.index, "prefill_instance"] >= 0) if "prefill_instance" in req else \
        pd.Series(False, index=parts.index)
    groups: list[tuple[str, pd.Series]] = []
    for name, mask in (("P/D", remote), ("local prefill", ~remote)):
        sub = parts[mask.to_numpy()]
        if len(sub):
            groups.append((f"{name}: mean (n={len(sub)})", sub.mean()))
            tot = sub.sum(axis=1)
            groups.append((f"{name}: p99 request", sub.loc[tot.sort_values().index[int(0.99 * (len(tot) - 1))]]))
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * max(len(groups), 1)))
    for y, (_label, row) in enumerate(groups):
        left = 0.0
        for part, colour in PARTS:
            v = float(row[part])
            ax.barh(y, v, left=left, color=colour, label=part if y == 0 else None)
            left += v
    ax.set_yticks(range(len(groups)), [g[0] for g in groups])
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(title)
    if groups:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def busy_share(series: Sequence[tuple[float, int]], edges: np.ndarray) -> np.ndarray:
    """Per bin of ``edges``: the share of time the link had at least one transfer active."""
    out = np.zeros(len(edges) - 1)
    pts = [*series, (float(edges[-1]), 0)]
    for (t0, n), (t1, _) in itertools.pairwise(pts):
        if n and t1 > t0:
            lo = np.clip(edges[:-1], t0, t1)
            hi = np.clip(edges[1:], t0, t1)
            out += hi - lo
    return out / np.diff(edges)


def link_utilisation(busy: Mapping[str, Sequence[tuple[float, int]]], end_s: float, bins: int = 60,
                     title: str = "KV-transfer links: share of time busy") -> Figure:
    """Each link's busy share per time bin (a busy link splits its bandwidth over its transfers)."""
    fig, ax = plt.subplots(figsize=(8, 3))
    edges = np.linspace(0.0, max(end_s, 1e-9), bins + 1)
    mid = (edges[:-1] + edges[1:]) / 2
    for name, series in busy.items():
        if series:
            ax.plot(mid, 100 * busy_share(series, edges), label=name, drawstyle="steps-mid")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("busy (% of bin)")
    ax.set_title(title)
    if busy:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
