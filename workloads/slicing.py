"""Cut a window out of a trace, compress or stretch its time, and thin it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.errors import ConfigError


def slice_trace(df: pd.DataFrame, *, start: float = 0.0, duration: float | None = None,
                rate_scale: float = 1.0, sample: float = 1.0,
                rng: np.random.Generator | None = None) -> pd.DataFrame:
    """Requests with ``start <= arrival_s < start + duration``, re-timed from 0.

    ``rate_scale`` > 1 compresses time (2.0 doubles the arrival rate); ``sample`` keeps each
    request independently with that probability, drawn from ``rng``.
    """
    if rate_scale <= 0:
        raise ConfigError(f"--rate-scale must be > 0, got {rate_scale}")
    if not 0 < sample <= 1:
        raise ConfigError(f"--sample must be in (0, 1], got {sample}")
    if duration is not None and duration <= 0:
        raise ConfigError(f"--duration must be > 0, got {duration}")
    t = df["arrival_s"].to_numpy()
    keep = t >= start
    if duration is not None:
        keep &= t < start + duration
    if sample < 1:
        if rng is None:
            raise ConfigError("sampling needs a seeded generator")
        keep &= rng.random(len(df)) < sample
    out = df[keep].reset_index(drop=True)
    out["arrival_s"] = (out["arrival_s"] - start) / rate_scale
    return out
