"""One row of ``sweep.parquet``: the point's identity and swept values, then its metrics.

A row is flat (no nested dicts) so the table goes straight into pandas and the plots:
the summary's nested sections become prefixed columns (``ttft_p99_s``, ``mem_free``, ...;
:meth:`sim.io.summary.Summary.flat`).
"""

from __future__ import annotations

from typing import Any

from sim.sweep.point import Point

#: Columns that depend on wall-clock time (excluded when comparing backends).
TIMING_COLUMNS = ("wall_s", "simulate_s")
#: How a row was made: ``derived_from`` is the key of the simulated point it was derived from
#: (:mod:`sim.sweep.derive`), "" when it was simulated itself. Excluded with the timings when
#: comparing tables made different ways.
PROVENANCE_COLUMNS = ("derived_from",)


def row_head(p: Point) -> dict[str, Any]:
    """A closed loop's ``max_concurrency`` is in its row, a failed one's too (a table of closed
    loops is read by it: throughput against clients, as InferenceX plots it); an open loop's row
    has no such cell, its value is no scalar (the table has the column, empty: ``store.py``)."""
    n = p.max_concurrency
    return {"key": p.key, **p.columns, **({"max_concurrency": n} if n is not None else {}),
            "model": p.config["model"], "gpu": p.config["gpu"], "trace_hash": p.trace_hash}


def failed_row(p: Point, error: str) -> dict[str, Any]:
    return {**row_head(p), "status": "failed", "error": error, "wall_s": 0.0}
