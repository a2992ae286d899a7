"""Does the configuration keep up with the trace? Offered vs served request rate.

``offered_rps`` is the arrival rate of the requests the configuration accepts (rejections are
counted apart): ``(n - 1) / (last arrival - first arrival)``. ``served_rps`` is the completion
rate, measured the same way over the finish times: ``(finished - 1) / (last finish - first
finish)``. Measured over their own spans, both rates are free of the run's start-up and drain,
so a configuration that keeps up serves at the offered rate whatever its latency::

    keeps up     arrivals  | | | | | | | |            finishes      | | | | | | | |
    overloaded   arrivals  | | | | | | | |            finishes      |  |  |  |  |  |  |  |
                           <- offered span ->                       <--- longer span --->

The run is *overloaded* when ``served_rps < 0.9 * offered_rps``: the queue grows while requests
arrive. ``backlog_at_last_arrival`` counts the accepted requests that had arrived but not
started when the last one arrived (the queue it found). Fewer than
:data:`MIN_REQUESTS` accepted requests, or all arriving at once, are too few to judge.

Served rates alone miss bursts: a configuration can serve every request of the trace at its
average rate while each burst waits its turn (issue 50: "keeps up" at a TTFT p50 of 16 s). So
"keeps up" is said only when requests do not wait. The *wait* of a request is the time from its
arrival until its first step (on its prefill instance in a P/D cluster). The run is *overloaded
during bursts* when the wait is the larger part of TTFT at p50 (and above
:data:`WAIT_FLOOR_S`: one step's wait is no queue), or the wait's p90 is above
:data:`BURST_WAIT_S`; the verdict then gives the queue's peak (requests arrived, not started).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.io import fmt

SERVED_SHARE = 0.9      # overloaded below this share of the offered rate
MIN_REQUESTS = 10
WAIT_FLOOR_S = 0.5      # a p50 wait below this is a step's wait, not a queue
BURST_WAIT_S = 3.0      # "a few seconds": a p90 wait above it is a queue


@dataclass(frozen=True, slots=True)
class Load:
    offered_rps: float | None = None
    served_rps: float | None = None
    backlog_at_last_arrival: int = 0
    overloaded: bool = False
    overloaded_in_bursts: bool = False   # served at the offered rate, but requests queued (module docstring)
    queue_peak: int = 0                  # most requests arrived and not yet started, at once
    wait_p50_s: float = 0.0              # arrival -> first step
    wait_p90_s: float = 0.0

    @property
    def flagged(self) -> bool:
        """Overloaded, throughout or in bursts (the summary shows it in red)."""
        return self.overloaded or self.overloaded_in_bursts

    def line(self) -> str:
        """One line for the summary table."""
        if self.offered_rps is None:
            return "not judged (too few requests or one burst)"
        rates = f"{fmt.num(self.offered_rps, whole=False)} / {fmt.num(self.served_rps, whole=False)} req/s"
        if self.overloaded:
            return f"OVERLOADED: {rates}; queue of {self.backlog_at_last_arrival:,} at the last arrival"
        if self.overloaded_in_bursts:
            return (f"overloaded during bursts: {rates}, but requests wait "
                    f"{fmt.durations((self.wait_p50_s, self.wait_p90_s))} (p50/p90) for their first step; "
                    f"queue peak {self.queue_peak:,}")
        return f"keeps up: {rates}"


def _rate(times: pd.Series) -> float | None:
    span = float(times.max() - times.min()) if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else None


def queue_peak(arrival: np.ndarray, start: np.ndarray) -> int:
    """Most requests arrived and not started at one instant (NaN start: never started). A
    request that starts as it arrives is never counted: at equal times starts come first."""
    n = len(arrival)
    t = np.concatenate([arrival, np.where(np.isnan(start), np.inf, start)])
    step = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.lexsort((step, t))
    return int(np.cumsum(step[order]).max()) if n else 0


def _bursts(acc: pd.DataFrame, start: np.ndarray) -> tuple[bool, int, float, float]:
    """(overloaded in bursts, queue peak, wait p50, wait p90) of the accepted requests."""
    arrival = acc["arrival_s"].to_numpy(np.float64)
    wait = start - arrival
    done = ~np.isnan(wait)
    if not done.any():
        return False, queue_peak(arrival, start), 0.0, 0.0
    w50, w90 = (float(x) for x in np.percentile(wait[done], [50, 90]))
    ttft = acc.loc[acc["status"] == "finished", "ttft_s"].dropna() if "ttft_s" in acc else pd.Series(dtype=float)
    larger_part = len(ttft) > 0 and w50 > WAIT_FLOOR_S and w50 > 0.5 * float(ttft.median())
    return larger_part or w90 > BURST_WAIT_S, queue_peak(arrival, start), w50, w90


def offered_load(req: pd.DataFrame, start_s: pd.Series | None = None) -> Load:
    """The load verdict from a requests table (``sim.io.results.REQUEST_COLUMNS``). ``start_s``:
    each request's first step when it is not ``first_scheduled_s`` (a P/D request's prefill)."""
    keep = req["status"] != "rejected"
    acc = req[keep]
    offered = _rate(acc["arrival_s"]) if len(acc) >= MIN_REQUESTS else None
    if offered is None:
        return Load()
    start = (start_s[keep] if start_s is not None else acc["first_scheduled_s"]).to_numpy(np.float64)
    last = float(acc["arrival_s"].max())
    started = start <= last   # NaN (never started) compares False
    backlog = int(((acc["arrival_s"].to_numpy() < last) & ~started).sum())
    served = _rate(acc.loc[acc["status"] == "finished", "finish_s"])
    overloaded = served is None or served < SERVED_SHARE * offered
    return Load(offered, served, backlog, overloaded, *_bursts(acc, start))
