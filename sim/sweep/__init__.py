"""Parameter sweeps: grid expansion, one simulation per distinct run, resumable Parquet results.

    grid = parse_sets(["gpu_memory_utilization=0.85,0.9", "block_size=8,16,32"])
    df = run_sweep(expand(grid, base={"cost_model": "roofline"}, trace="t.csv"), out=Path("sw")).table

One concept per module:

- ``grid.py``       ``--set`` flags and ``--grid`` YAML -> ``{key: [values]}``
- ``expansion.py``  grid -> points (cartesian product, meaningless keys collapsed)
- ``point.py``      a point and its key: hash of the full resolved config + the trace's
                    content hash (+ its clients, ``max_concurrency``), so a rerun into the
                    same directory runs only what is missing
- ``row.py``        a point's result as one flat row
- ``worker.py``     running points (never raises: a failure is a row), summary only
- ``derive.py``     points that differ only in pool knobs and whose capacity decisions cannot
                    differ from a simulated one's: derived from it, not simulated
- ``reuse.py``      a worker parses each trace once; every point gets fresh Requests cheaply
- ``store.py``      crash-safe parts + compaction into ``sweep.parquet``
- ``driver.py``     :func:`run_sweep`: resume, run on :mod:`sim.run.executor` (local pool or
                    Ray, see distributed-sweeps.md), store
"""

from __future__ import annotations

from sim.sweep.driver import ProgressFn, SweepRun, TaskFn, run_sweep
from sim.sweep.expansion import IRRELEVANT, expand
from sim.sweep.grid import CLIENTS_KEY, TRACE_KEY, load_grid_yaml, parse_sets
from sim.sweep.point import Point, point_key
from sim.sweep.row import PROVENANCE_COLUMNS, TIMING_COLUMNS, failed_row
from sim.sweep.store import SweepStore
from sim.sweep.worker import run_point

__all__ = ["CLIENTS_KEY", "IRRELEVANT", "PROVENANCE_COLUMNS", "TIMING_COLUMNS", "TRACE_KEY", "Point", "ProgressFn",
           "SweepRun", "SweepStore", "TaskFn", "expand", "failed_row", "load_grid_yaml",
           "parse_sets", "point_key", "run_point", "run_sweep"]
