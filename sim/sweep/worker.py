"""Running one sweep point, in whatever process the executor put it.

A worker keeps the traces it has loaded (path -> trace), so a process that runs many points
reads and parses each trace once (``reuse.py``: fresh Requests from the parsed rows), keeps
no tables (summary only: a row needs the summary), and checks the content hash against the planned one: a trace edited
after the sweep was planned fails its points instead of silently mixing two workloads.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from sim.config.schema import SimConfig
from sim.sweep.point import Point
from sim.sweep.reuse import fresh_requests
from sim.sweep.row import row_head
from workloads import Trace, load_trace

_TRACES: dict[str, tuple[Trace, str]] = {}  # per worker process: path -> (trace, hash)


def _trace_for(p: Point) -> Trace:
    got = _TRACES.get(p.trace_path)
    if got is None or got[1] != p.trace_hash:
        tr = load_trace(p.trace_path)
        got = _TRACES[p.trace_path] = (tr, tr.content_hash)
    if got[1] != p.trace_hash:
        raise RuntimeError(f"{p.trace_path}: content changed since the sweep was planned")
    return got[0]


def run_point(p: Point, trace: Trace | None = None) -> dict[str, Any]:
    """Simulate one point; never raises (a failure becomes a row with ``status='failed'``)."""
    from sim.run.simulate import simulate

    t0 = time.perf_counter()
    row = row_head(p)
    try:
        cfg, tr = SimConfig(**p.config), trace if trace is not None else _trace_for(p)
        res = simulate(cfg, tr, requests=fresh_requests(tr, cfg), summary_only=True)
        row.update(status="ok", error="", **res.summary.flat())
    except Exception as e:  # the point fails, the sweep goes on
        last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f" ({Path(last.filename).name}:{last.lineno})" if last else ""
        row.update(status="failed", error=f"{type(e).__name__}: {e}{where}")
    row["wall_s"] = time.perf_counter() - t0
    return row
