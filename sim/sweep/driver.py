"""The sweep driver: skip what ``DIR`` already holds, run the rest on :mod:`sim.run.executor`, store
each row as it arrives, compact.

Both backends send each class of points (:func:`classes`) to one worker as one task, so the
worker derives what it can from one simulated base (``derive.py``). Local workers read each
trace from its path themselves (cached per process, see ``worker.py``); for Ray the driver loads
every trace once and ships it with ``ray.put``, since workers on other machines may not have
the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import ConfigError
from sim.run.executor import BACKENDS, completed
from sim.sweep.derive import class_key
from sim.sweep.point import Point
from sim.sweep.row import failed_row
from sim.sweep.store import SweepStore
from sim.sweep.worker import run_points
from workloads import Trace, load_trace

ProgressFn = Callable[[int, int, int], None]  # (done, total, failed)
TaskFn = Callable[[list[Point], Trace | None], list[dict[str, Any]]]  # a class of points -> their rows


@dataclass(slots=True)
class SweepRun:
    table: pd.DataFrame
    planned: int
    skipped: int
    ran: int
    failed: int


def classes(points: list[Point], jobs: int) -> list[list[Point]]:
    """Tasks of points that differ only in pool knobs (:func:`~sim.sweep.derive.class_key`), so
    one worker derives them from one simulated base; split in halves while there are fewer
    tasks than workers."""
    by: dict[tuple[str, str, int | None], list[Point]] = {}
    for p in points:  # (a base derives only for its own clients: derive.py)
        by.setdefault((p.trace_hash, class_key(p.config), p.max_concurrency), []).append(p)
    tasks = list(by.values())
    while len(tasks) < jobs and max(map(len, tasks), default=0) > 1:
        big = max(tasks, key=len)
        tasks.remove(big)
        tasks += [big[::2], big[1::2]]
    return tasks


def _trace_of(task: list[Point]) -> str:
    return task[0].trace_hash  # a class holds points of one trace


def _lost(task: list[Point], reason: str) -> list[dict[str, Any]]:
    return [failed_row(p, reason) for p in task]


def run_sweep(points: list[Point], out: Path, *, backend: str = "local", jobs: int = 1,
              address: str | None = None, max_retries: int = 3, retry_failed: bool = False,
              progress: ProgressFn | None = None, ray_fn: TaskFn = run_points) -> SweepRun:
    """Run the points not yet recorded under ``out``; return the compacted table.

    ``ray_fn`` replaces the Ray task body (tests use it to kill a worker on purpose).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r}: expected local or ray")
    store = SweepStore(out)
    done = store.done()
    todo = [p for p in points if p.key not in done or (retry_failed and done[p.key] != "ok")]
    skipped = len(points) - len(todo)
    if backend == "ray":
        traces = {p.trace_hash: p.trace_path for p in todo}
        tasks = completed(ray_fn, classes(todo, jobs), {h: load_trace(path) for h, path in traces.items()},
                          key=_trace_of, backend="ray", workers=jobs, address=address, max_retries=max_retries,
                          lost=_lost)
    else:
        tasks = completed(run_points, classes(todo, jobs), backend="local", workers=jobs, max_retries=max_retries,
                          start="spawn", lost=_lost)
    rows: Iterator[dict[str, Any]] = (row for _, task_rows in tasks for row in task_rows)  # a task: one class
    ran = failed = 0
    if progress:
        progress(0, len(todo), 0)
    for row in rows:
        store.append(row)
        ran += 1
        failed += row["status"] != "ok"
        if progress:
            progress(ran, len(todo), failed)
    table = store.compact([p.key for p in points])
    return SweepRun(table, len(points), skipped, ran, failed)
