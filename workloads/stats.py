"""Summary statistics of a trace: what ``kvsim trace info`` prints.

Definitions follow the public traces' README (``$KVSIM_DATA/traces/README.md``): percentiles
interpolate linearly; the mean rate is rows / (last - first arrival); the inter-arrival CV is std/mean of the gaps (ddof=0);
per-second and per-minute counts use bins aligned to the first arrival (the per-minute
min/max are over non-empty minutes; the last, partial minute counts as a full one); prefix reuse is the
share of block references whose hash id appeared in an earlier request (unbounded cache).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from workloads.resolution import resolution_reason, timestamp_resolution

if TYPE_CHECKING:
    from workloads.schema import Trace

PCTS = (50, 90, 99)


def has_prefix_info(trace: Trace) -> bool:
    """Whether the trace can hit the prefix cache at all: token ids, prefix hashes or fanned-out samples."""
    df = trace.df
    fans = any(c in df and bool((df[c] > 1).any()) for c in ("n", "beam_width"))
    return fans or any(c in df and bool(df[c].map(lambda v: v is not None and len(v) > 0).any())
                       for c in ("hash_ids", "prompt_token_ids"))


def length_stats(x: np.ndarray) -> dict[str, float]:
    """Mean, std, min, p50/p90/p99 (linear interpolation) and max of a length column."""
    if len(x) == 0:
        return {}
    x = np.asarray(x, dtype="float64")
    q = np.percentile(x, PCTS)
    return {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()),
            **{f"p{p}": float(v) for p, v in zip(PCTS, q, strict=True)}, "max": float(x.max())}


def arrival_stats(t: np.ndarray) -> dict[str, float | None]:
    """Span, mean rate, inter-arrival CV, peak requests in one second, min/max per-minute rate."""
    t = np.sort(np.asarray(t, dtype="float64"))
    span = float(t[-1] - t[0]) if len(t) else 0.0
    out: dict[str, float | None] = {"span_s": span, "rate_per_s": len(t) / span if span > 0 else None}
    gaps = np.diff(t)
    out["interarrival_cv"] = float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None
    if len(t):
        rel = t - t[0]
        out["peak_per_s"] = float(np.bincount(rel.astype(np.int64)).max())
        per_min = np.bincount((rel // 60).astype(np.int64))
        busy = per_min[per_min > 0] / 60.0  # as the README: non-empty bins, last one may be partial
        out["minute_rate_max"] = float(busy.max())
        out["minute_rate_min"] = float(busy.min())
        out["idle_minutes"] = float((per_min == 0).sum())
    return out


def prefix_reuse(hash_lists: pd.Series) -> dict[str, Any]:
    """Block references, unique blocks and the reusable share, in request (arrival) order."""
    lens = hash_lists.map(len).to_numpy(dtype=np.int64)
    if lens.sum() == 0:
        return {"block_refs": 0, "unique_blocks": 0, "prefix_reuse": 0.0}
    flat = np.concatenate([np.asarray(h, dtype=np.int64) for h in hash_lists if len(h)])
    req = np.repeat(np.arange(len(lens)), lens)
    uniq, inv = np.unique(flat, return_inverse=True)
    first_req = np.full(len(uniq), np.iinfo(np.int64).max)
    np.minimum.at(first_req, inv, req)
    reused = int((req > first_req[inv]).sum())
    return {"block_refs": len(flat), "unique_blocks": len(uniq),
            "prefix_reuse": reused / len(flat), "blocks_per_request": length_stats(lens)}


def trace_stats(df: pd.DataFrame) -> dict[str, Any]:
    """All of the above for a normalized trace frame (sorted by arrival)."""
    out: dict[str, Any] = {"num_requests": len(df)}
    out.update(arrival_stats(df["arrival_s"].to_numpy()))
    t = df["arrival_s"].to_numpy()
    res = timestamp_resolution(t)
    out["timestamps"] = {"coarse": False, "rule": resolution_reason(t)} if res is None else {
        "equal_share": res.equal_share, "granularity_s": res.granularity_s, "grid_s": res.grid_s,
        "on_grid_share": res.on_grid, "coarse": res.coarse, "rule": res.reason()}
    out["prompt_tokens"] = length_stats(df["prompt_tokens"].to_numpy())
    out["output_tokens"] = length_stats(df["output_tokens"].to_numpy())
    if "hash_ids" in df.columns:
        out.update(prefix_reuse(df["hash_ids"]))
        if "tokens_per_hash" in df.columns and len(df):
            out["tokens_per_hash"] = int(df["tokens_per_hash"].iloc[0])
    for col in ("n", "beam_width"):
        if col in df.columns:
            out[f"{col}_mean"] = float(df[col].mean())
    return out
