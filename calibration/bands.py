"""Held-out error bands of a stack fit, and where the V1-era runs it is fitted on live."""

from __future__ import annotations

from typing import Any

import numpy as np

from calibration.public_rows import PUBLIC
from sim.cost.stack import Band

RUNS = PUBLIC / "vllm-0.15.1-h100"


def band_of(ratio: np.ndarray, n: int, what: str) -> dict[str, Any]:
    """p10 / p90 of measured / predicted - 1 on held-out rows: about 80 % of them fall inside."""
    lo, hi = (float(np.percentile(ratio, q)) for q in (10, 90))
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    inside = float(np.mean((ratio >= lo - 1e-12) & (ratio <= hi + 1e-12)) * 100)
    # widened, but never past -100 %: measured / predicted - 1 cannot fall below -1
    b = Band(round(lo, 4), round(hi, 4), round(max(lo * 1.5, -0.99), 4), round(hi * 1.5, 4))
    return {"optimistic": b.optimistic, "pessimistic": b.pessimistic,
            "optimistic_extrapolated": b.optimistic_extrapolated, "pessimistic_extrapolated": b.pessimistic_extrapolated,
            "basis": f"10th/90th percentile of measured/predicted - 1 on {n} held-out {what} ({inside:.0f} % inside); "
                     "extrapolated (another GPU or TP than fitted, or outside the fitted regime): widened x1.5", "coverage_pct": round(inside, 1)}
