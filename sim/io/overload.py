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
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from sim.io import fmt

SERVED_SHARE = 0.9      # overloaded below this share of the offered rate
MIN_REQUESTS = 10


@dataclass(frozen=True, slots=True)
class Load:
    offered_rps: float | None = None
    served_rps: float | None = None
    backlog_at_last_arrival: int = 0
    overloaded: bool = False

    def line(self) -> str:
        """One line for the summary table."""
        if self.offered_rps is None:
            return "not judged (too few requests or one burst)"
        rates = f"{fmt.num(self.offered_rps, whole=False)} / {fmt.num(self.served_rps, whole=False)} req/s"
        if not self.overloaded:
            return f"keeps up: {rates}"
        return f"OVERLOADED: {rates}; queue of {self.backlog_at_last_arrival:,} at the last arrival"


def _rate(times: pd.Series) -> float | None:
    span = float(times.max() - times.min()) if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else None


def offered_load(req: pd.DataFrame) -> Load:
    """The load verdict from a requests table (``sim.io.results.REQUEST_COLUMNS``)."""
    acc = req[req["status"] != "rejected"]
    offered = _rate(acc["arrival_s"]) if len(acc) >= MIN_REQUESTS else None
    if offered is None:
        return Load()
    last = float(acc["arrival_s"].max())
    started = acc["first_scheduled_s"].to_numpy() <= last   # NaN (never started) compares False
    backlog = int(((acc["arrival_s"].to_numpy() < last) & ~started).sum())
    served = _rate(acc.loc[acc["status"] == "finished", "finish_s"])
    overloaded = served is None or served < SERVED_SHARE * offered
    return Load(offered, served, backlog, overloaded)
