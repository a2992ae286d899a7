"""Timestamp resolution of a trace, and spreading coarse timestamps over it.

Some public traces record arrivals coarsely: about 90 % of the Mooncake conversation trace's
inter-arrival gaps are 0, its distinct timestamps about 3 s apart. Replayed as they are, each
group of equal timestamps arrives as one simultaneous burst, which the real service never saw.
:func:`timestamp_resolution` detects this (share of equal timestamps, granularity = the median
step between distinct timestamps); :func:`spread_arrivals` places each group's members uniformly
over ``[t, t + granularity)`` (never past the next distinct timestamp), with a seeded Generator.

A trace counts as coarse only when it has at least :data:`MIN_REQUESTS` rows, at least
:data:`MIN_DISTINCT` distinct timestamps and at least :data:`MIN_EQUAL_SHARE` of its gaps are 0:
an offline batch (everything at t=0) and small hand-made bursts are replayed as written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_REQUESTS = 100
MIN_DISTINCT = 10
MIN_EQUAL_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class Resolution:
    """What the arrival column says about its own clock."""

    equal_share: float      # share of inter-arrival gaps that are exactly 0
    granularity_s: float    # median step between distinct timestamps
    coarse: bool            # groups of equal timestamps are recording artefacts, not bursts

    def note(self) -> str:
        """One line for ``trace info`` and the trace notes."""
        head = (f"timestamps are coarse: {100 * self.equal_share:.0f}% of inter-arrival gaps are 0, "
                f"distinct timestamps ~{_secs(self.granularity_s)} apart")
        return head + ("; kvsim spreads each group uniformly over that interval (seeded) unless "
                       "arrival_jitter is off (--no-arrival-jitter)")


def _secs(s: float) -> str:
    return f"{s * 1000:.3g} ms" if s < 1 else f"{s:.3g} s"


def timestamp_resolution(arrival_s: np.ndarray) -> Resolution | None:
    """The resolution of a sorted arrival column; None when it has too few distinct times to tell."""
    t = np.asarray(arrival_s, dtype=np.float64)
    if len(t) < 2:
        return None
    distinct = np.unique(t)
    if len(distinct) < 2:
        return None
    equal = float(np.mean(np.diff(t) == 0))
    gran = float(np.median(np.diff(distinct)))
    coarse = len(t) >= MIN_REQUESTS and len(distinct) >= MIN_DISTINCT and equal >= MIN_EQUAL_SHARE
    return Resolution(equal, gran, coarse)


def spread_arrivals(arrival_s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``arrival_s`` (sorted) with each group of equal timestamps spread uniformly over its interval.

    A group at ``t`` gets sorted uniform offsets in ``[0, min(granularity, next - t))`` (the last
    group: ``granularity``), so the order of groups is kept and the result stays sorted. Returns the
    input unchanged (same array) when the trace is not coarse; draws nothing from ``rng`` then.
    """
    t = np.asarray(arrival_s, dtype=np.float64)
    res = timestamp_resolution(t)
    if res is None or not res.coarse:
        return t
    order = np.argsort(t, kind="stable")
    ts = t[order]
    distinct, count = np.unique(ts, return_counts=True)
    nxt = np.append(np.diff(distinct), res.granularity_s)
    width = np.repeat(np.minimum(nxt, res.granularity_s), count)
    group = np.repeat(np.arange(len(distinct)), count)
    u = rng.random(len(t))
    u = u[np.lexsort((u, group))]  # sorted within each group: row i still arrives no later than i+1
    out = np.empty_like(t)
    out[order] = ts + u * width
    return out
