"""Running sweep points, in whatever process the executor put them.

A worker keeps the traces it has loaded (path -> trace), so a process that runs many points
reads and parses each trace once (``reuse.py``: fresh Requests from the parsed rows), keeps
no tables (summary only: a row needs the summary), and checks the content hash against the planned one: a trace edited
after the sweep was planned fails its points instead of silently mixing two workloads.

:func:`run_points` takes points that differ only in pool knobs (:func:`~sim.sweep.derive.class_key`):
it simulates the one with the largest pool first and derives every point whose capacity
decisions its margins show to be the same (:mod:`sim.sweep.derive`); the rest are simulated
and serve as bases too.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from sim.config.schema import SimConfig
from sim.run.clients import ClientSpec
from sim.sweep.derive import Base, derive, run_base
from sim.sweep.point import Point
from sim.sweep.reuse import fresh_requests
from sim.sweep.row import row_head
from workloads import Trace, load_trace

_TRACES: dict[str, tuple[Trace, str]] = {}  # per worker process: path -> (trace, hash)
MAX_BASES = 4  # simulated runs a task keeps to derive from (a base holds its step columns)


def _trace_for(p: Point) -> Trace:
    got = _TRACES.get(p.trace_path)
    if got is None or got[1] != p.trace_hash:
        tr = load_trace(p.trace_path)
        got = _TRACES[p.trace_path] = (tr, tr.content_hash)
    if got[1] != p.trace_hash:
        raise RuntimeError(f"{p.trace_path}: content changed since the sweep was planned")
    return got[0]


def _failed(row: dict[str, Any], e: Exception) -> None:
    last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" ({Path(last.filename).name}:{last.lineno})" if last else ""
    row.update(status="failed", error=f"{type(e).__name__}: {e}{where}")


def run_point(p: Point, trace: Trace | None = None) -> dict[str, Any]:
    """Simulate one point; never raises (a failure becomes a row with ``status='failed'``)."""
    from sim.run.simulate import simulate

    t0 = time.perf_counter()
    row = row_head(p)
    try:
        cfg, tr = SimConfig(**p.config), trace if trace is not None else _trace_for(p)
        res = simulate(cfg, tr, requests=fresh_requests(tr, cfg), summary_only=True,
                       clients=ClientSpec(p.max_concurrency))
        row.update(status="ok", error="", **res.summary.flat(), derived_from="")
    except Exception as e:  # the point fails, the sweep goes on
        _failed(row, e)
    row["wall_s"] = time.perf_counter() - t0
    return row


def _pool_order(p: Point) -> tuple[float, float]:
    c = p.config
    return (-float(c.get("max_num_seqs") or 1 << 30), -float(c.get("gpu_memory_utilization") or 1.0))


def run_points(points: list[Point], trace: Trace | None = None) -> list[dict[str, Any]]:
    """Rows for ``points`` (one class: one trace, sent by the same clients), in their order;
    derived where a simulated one allows."""
    bases: list[tuple[str, Base]] = []
    rows: dict[str, dict[str, Any]] = {}
    for p in sorted(points, key=_pool_order):  # the largest pool and cap first: the likeliest base
        t0 = time.perf_counter()
        row = rows[p.key] = row_head(p)
        try:
            cfg, tr = SimConfig(**p.config), trace if trace is not None else _trace_for(p)
            clients = ClientSpec(p.max_concurrency)
            got = next(((key, s) for key, b in bases
                        if b.trace is tr and (s := derive(b, cfg, clients)) is not None), None)
            if got is None:
                s, base = run_base(cfg, tr, fresh_requests(tr, cfg), clients)
                if base is not None and len(bases) < MAX_BASES:
                    bases.append((p.key, base))
                got = ("", s)
            row.update(status="ok", error="", **got[1].flat(), derived_from=got[0])
        except Exception as e:  # the point fails, the sweep goes on
            _failed(row, e)
        row["wall_s"] = time.perf_counter() - t0
    return [rows[p.key] for p in points]
