"""Summary of a ServeGen archive as published (what ``kvsim trace info ARCHIVE`` prints)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from workloads.servegen import RATE_WINDOW_S, aggregate_rate, mixture, pmf_stats, read_archive

FIELDS = ("input_tokens", "output_tokens", "text_tokens", "image_tokens", "image_count", "reason_ratio")


def servegen_summary(path: Path) -> dict[str, Any]:
    """Clients, span, aggregate rate mean/min/max (published units), length mixtures, mean CV."""
    data = read_archive(path)
    agg = aggregate_rate(data)
    cvs = np.concatenate([c.windows.loc[c.windows["rate"] > 0, "cv"].to_numpy() for c in data.clients.values()])
    out: dict[str, Any] = {
        "file": str(path), "format": "servegen", "model": data.model, "clients": len(data.clients),
        "clients_with_lengths": sum(1 for c in data.clients.values() if c.pmfs),
        "windows": len(agg), "span_s": len(agg) * RATE_WINDOW_S,
        "aggregate_rate": {"mean": float(agg.mean()), "min": float(agg.min()), "max": float(agg.max())},
        "mean_cv_active": float(cvs.mean()) if len(cvs) else None,
    }
    for f in FIELDS:
        m = mixture(data, f)
        if m is not None:
            out[f] = pmf_stats(m)
    return out
