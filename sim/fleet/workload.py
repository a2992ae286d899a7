"""The load a candidate is tested under: trace windows per seed, rate scaling, peak demand.

Capacity search does not replay the whole trace at every probe. Each seed draws one
contiguous **window** of ``window`` requests (a block bootstrap: it keeps the trace's
burstiness and its length mix) and thins it (each request kept with probability ``keep``),
with a ``numpy.random.Generator`` seeded from ``(seed, replication)``. The same window is used
for every candidate (common random numbers), so candidates are compared on equal footing.
A probe at ``qps`` compresses or stretches the window's arrival times so its mean rate is
``qps``. The full trace is used for the final routed validation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workloads.schema import Trace, validate

KEEP = ("arrival_s", "prompt_tokens", "output_tokens", "request_id", "hash_ids", "tokens_per_hash",
        "prompt_token_ids", "priority", "n", "beam_width")


def to_trace(df: pd.DataFrame, path: str = "<derived>") -> Trace:
    """A validated :class:`Trace` from a frame with the normalized columns."""
    cols = [c for c in KEEP if c in df.columns]
    return Trace(df=validate(df[cols].copy(), path), path=path, format="synthetic")


def mean_rate(arrival_s: np.ndarray) -> float:
    """Requests per second: (rows - 1) / span, as the trace README defines it."""
    if len(arrival_s) < 2:
        return 0.0
    span = float(arrival_s[-1] - arrival_s[0])
    return (len(arrival_s) - 1) / span if span > 0 else float("inf")


def scale_rate(df: pd.DataFrame, factor: float) -> pd.DataFrame:
    """Arrival times divided by ``factor`` (rate x factor), rebased to start at 0."""
    out = df.copy()
    a = out["arrival_s"].to_numpy(np.float64)
    out["arrival_s"] = (a - a[0]) / factor if len(a) else a
    return out


def at_qps(df: pd.DataFrame, qps: float) -> pd.DataFrame:
    """Rescale a window so its mean rate is ``qps``."""
    r = mean_rate(df["arrival_s"].to_numpy(np.float64))
    return scale_rate(df, qps / r if np.isfinite(r) and r > 0 else 1.0)


def draw_window(df: pd.DataFrame, seed: int, rep: int, window: int, keep: float = 0.9) -> pd.DataFrame:
    """Replication ``rep``'s sample of the trace: a random contiguous window, thinned."""
    rng = np.random.default_rng([seed, rep])
    n = len(df)
    size = min(window, n)
    start = int(rng.integers(0, n - size + 1))
    w = df.iloc[start:start + size]
    if keep < 1.0 and size > 20:
        w = w[rng.random(size) < keep]
    w = w.reset_index(drop=True)
    w["request_id"] = [str(i) for i in range(len(w))]
    return w


def peak_rate(arrival_s: np.ndarray, window_s: float) -> float:
    """Highest mean rate over any window of ``window_s`` seconds (the trace's own mean if shorter)."""
    if len(arrival_s) < 2:
        return 0.0
    span = float(arrival_s[-1] - arrival_s[0])
    if span <= window_s:
        return mean_rate(arrival_s)
    hi = np.searchsorted(arrival_s, arrival_s + window_s, side="left")
    counts = hi - np.arange(len(arrival_s))
    return float(counts.max()) / window_s


def rate_timeline(arrival_s: np.ndarray, bucket_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(bucket start times, requests per second in each bucket)."""
    if len(arrival_s) == 0:
        return np.zeros(0), np.zeros(0)
    nb = int(np.floor(float(arrival_s[-1]) / bucket_s)) + 1
    counts = np.bincount((arrival_s // bucket_s).astype(np.int64), minlength=nb)
    return np.arange(nb) * bucket_s, counts / bucket_s
