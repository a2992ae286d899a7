"""Timestamp resolution of a trace, and spreading coarse timestamps over it.

Some public traces record arrivals coarsely: about 90 % of the Mooncake conversation trace's
inter-arrival gaps are 0, its distinct timestamps sit on a ~3 s grid; BurstGPT stamps whole
seconds. Replayed as they are, each group of equal timestamps arrives as one simultaneous burst,
which the real service never saw. Other traces tie on purpose: a benchmark's bursts 40 ms apart,
``vllm bench serve --request-rate inf`` (everything at t = 0), an offline batch. Spreading those
would change the workload without the user asking, so the rule is narrow.

**The coarse-timestamp rule.** A trace is coarse, and :func:`spread_arrivals` places each
group's members uniformly over ``[t, t + granularity)`` (never past the next distinct
timestamp, seeded), only when all of these hold:

- at least :data:`MIN_REQUESTS` rows and :data:`MIN_DISTINCT` distinct timestamps (small
  hand-made bursts and batches are as written);
- at least :data:`MIN_EQUAL_SHARE` of the inter-arrival gaps are 0 (many ties);
- the distinct timestamps lie on a grid of :data:`MIN_GRID_S` or more: the grid step is the
  5th percentile of the steps between distinct timestamps, and at least :data:`MIN_ON_GRID` of
  those steps are whole multiples of it (within :data:`GRID_TOL` of a step: Mooncake's stamps
  are 2,999 / 3,000 / 3,001 ms apart).

Anything else replays as is: distinct times tens of ms apart are bursts, not a clock; the
arrivals of kvsim's generators and of ``--request-rate`` are continuous (never on a grid with
ties) or all at t = 0. :meth:`Resolution.reason` says which rule applied and why
(``kvsim trace info``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from workloads.schema import Trace

MIN_REQUESTS = 100
MIN_DISTINCT = 10
MIN_EQUAL_SHARE = 0.25
MIN_GRID_S = 1.0       # coarse clocks tick in whole seconds or more
MIN_ON_GRID = 0.9      # share of distinct-time steps that are multiples of the grid step
GRID_TOL = 0.02        # ... within this fraction of one grid step
GRID_QUANTILE = 5      # the grid step: this percentile of the distinct-time steps
JITTER_STREAM = 7      # the jitter's stream of the run's seed: sim.io.ingest.ARRIVAL_STREAM (a test checks)


@dataclass(frozen=True, slots=True)
class Resolution:
    """What the arrival column says about its own clock."""

    equal_share: float      # share of inter-arrival gaps that are exactly 0
    granularity_s: float    # median step between distinct timestamps
    coarse: bool            # groups of equal timestamps are recording artefacts, not bursts
    grid_s: float = 0.0     # the grid step (GRID_QUANTILE-th percentile of distinct-time steps)
    on_grid: float = 0.0    # share of distinct-time steps that are whole multiples of grid_s
    rows: int = 0
    distinct: int = 0

    def note(self) -> str:
        """One line for ``trace info`` and the trace notes (coarse traces)."""
        head = (f"timestamps are coarse: {100 * self.equal_share:.0f}% of inter-arrival gaps are 0, "
                f"distinct timestamps ~{_secs(self.granularity_s)} apart")
        return head + ("; kvsim spreads each group uniformly over that interval (seeded) unless "
                       "arrival_jitter is off (--no-arrival-jitter)")

    def reason(self) -> str:
        """Which rule applied and why, in one line (``kvsim trace info``)."""
        ties = f"{100 * self.equal_share:.0f}% of gaps are 0"
        if self.coarse:
            return (f"spread (coarse clock): {ties} and the distinct times sit on a ~{_secs(self.grid_s)} grid "
                    f"({100 * self.on_grid:.0f}% of steps); --no-arrival-jitter replays them as is")
        if self.rows < MIN_REQUESTS or self.distinct < MIN_DISTINCT:
            return (f"as is: {self.rows:,} requests, {self.distinct:,} distinct times (a coarse clock needs "
                    f">= {MIN_REQUESTS} and >= {MIN_DISTINCT})")
        if self.equal_share < MIN_EQUAL_SHARE:
            return f"as is: only {ties} (a coarse clock ties >= {100 * MIN_EQUAL_SHARE:.0f}%)"
        if self.grid_s < MIN_GRID_S:
            return (f"as is: {ties}, but distinct times are ~{_secs(self.grid_s)} apart, finer than a "
                    f"{_secs(MIN_GRID_S)} clock: the ties are bursts")
        return (f"as is: {ties}, but only {100 * self.on_grid:.0f}% of the steps between distinct times are "
                f"multiples of ~{_secs(self.grid_s)}: no regular clock")


def _secs(s: float) -> str:
    return f"{s * 1000:.3g} ms" if s < 1 else f"{s:.3g} s"


def _on_grid(steps: np.ndarray, grid: float) -> float:
    """Share of ``steps`` within GRID_TOL of a positive whole multiple of ``grid``."""
    if grid <= 0:
        return 0.0
    k = np.maximum(np.rint(steps / grid), 1.0)
    return float(np.mean(np.abs(steps - k * grid) <= GRID_TOL * grid))


def timestamp_resolution(arrival_s: np.ndarray) -> Resolution | None:
    """The resolution of a sorted arrival column; None when it has too few distinct times to tell."""
    t = np.asarray(arrival_s, dtype=np.float64)
    if len(t) < 2:
        return None
    distinct = np.unique(t)
    if len(distinct) < 2:
        return None
    equal = float(np.mean(np.diff(t) == 0))
    steps = np.diff(distinct)
    gran = float(np.median(steps))
    grid = float(np.percentile(steps, GRID_QUANTILE))
    on_grid = _on_grid(steps, grid)
    coarse = (len(t) >= MIN_REQUESTS and len(distinct) >= MIN_DISTINCT and equal >= MIN_EQUAL_SHARE
              and grid >= MIN_GRID_S and on_grid >= MIN_ON_GRID)
    return Resolution(equal, gran, coarse, grid, on_grid, len(t), len(distinct))


def resolution_reason(arrival_s: np.ndarray) -> str:
    """:meth:`Resolution.reason`, or the reason there is none (one distinct time: a batch)."""
    res = timestamp_resolution(arrival_s)
    if res is not None:
        return res.reason()
    n = len(arrival_s)
    return f"as is: {'all ' if n > 1 else ''}{n:,} request{'s' if n != 1 else ''} at one time (a batch)"


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


def spread_trace(trace: Trace, seed: int) -> Trace:
    """``trace`` with its coarse stamps spread now, on the file's own clock (as ``simulate`` does
    before --rate-scale), drawn as :mod:`sim.io.ingest` draws them. For callers that rescale time
    before ingest sees it (``kvsim plan``'s probes at a target rate): judged on a compressed
    clock, a 3 s grid would look like deliberate sub-second bursts and stay unspread. A trace
    that is not coarse comes back unchanged (the same object)."""
    t = trace.df["arrival_s"].to_numpy(np.float64)
    spread = spread_arrivals(t, np.random.default_rng([seed, JITTER_STREAM]))
    if spread is t:
        return trace
    df = trace.df.copy()
    df["arrival_s"] = spread
    order = np.argsort(spread, kind="stable")
    return dataclasses.replace(trace, df=df.iloc[order].reset_index(drop=True))
