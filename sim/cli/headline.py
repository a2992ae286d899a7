"""The rows every run's summary table opens with, one replica's or a cluster's: what ended, over
how long, at what throughput, whether the load was kept up with, and the client's latencies.

One function, so ``kvsim simulate`` and ``kvsim simulate --cluster`` say these things the same way
(units on every time, the load verdict in red when flagged)."""

from __future__ import annotations

from collections.abc import Mapping

from sim.io import fmt
from sim.io.overload import Load

Percentiles = tuple[float | None, float | None, float | None]  # p50, p90, p99 in seconds


def headline_rows(finished: int, rejected: int, simulated_s: float, requests_per_s: float,
                  output_tokens_per_s: float, load: Load, latencies: Mapping[str, Percentiles],
                  notes: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(metric, value) rows; ``latencies``: TTFT, TPOT, E2E (a metric with a missing percentile
    gets no row); ``notes``: the trace's notes, after the counts."""
    rows = [("requests finished / rejected", f"{finished:,} / {rejected:,}"),
            *(("trace note", note) for note in notes),
            ("simulated time", fmt.duration(simulated_s)),
            ("throughput", f"{fmt.num(requests_per_s)} req/s, {fmt.num(round(output_tokens_per_s))} out tok/s"),
            ("load (offered vs served)", f"[bold red]{load.line()}[/]" if load.flagged else load.line())]
    for name, p in latencies.items():
        if all(x is not None for x in p):
            rows.append((f"{name} p50/p90/p99", fmt.durations(p)))
    return rows
