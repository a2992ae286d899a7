"""Results in bounded memory: step records drained by chunks, request rows written by chunks.

A day of traffic on a fleet is tens of millions of engine steps; holding every
:class:`~sim.io.records.StepRecord` as a tuple costs ~400 bytes a step. A :class:`StepSink`
drains a replica's :class:`~sim.io.records.StepLog` whenever it holds ``chunk`` rows (called
from the replica's ``on_progress`` hook, between steps): each chunk becomes one numpy record
array, is folded into the running sums the summary needs (:class:`StepStats`), is written as
one row group of ``steps.parquet`` (pyarrow ``ParquetWriter``) when a path is given, and the
log's list is emptied in place (the engine keeps its bound ``append``).

Request rows are written in uid order by chunks too (:func:`write_requests`), so the file has
exactly the rows and types of the in-memory ``requests.parquet``. Latency percentiles never
need a request frame: :func:`~sim.io.results.request_columns` keeps only the columns the summary reads, as
numpy arrays, and gives the same values in the same order (so the same percentiles and means).

The memory shares are sequential sums in step order (:mod:`sim.io.step_fold`), so a streamed
run and an in-memory one give the same summary bit for bit, whatever the chunk size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.io.records import STEP_COLUMNS, StepLog, concat_steps, record_ends
from sim.io.results import MEM_CATS, request_frame
from sim.io.step_fold import StepSums
from sim.request import Request

CHUNK = 1 << 16   # steps (or requests) per chunk: ~9 MB of step records


@dataclass(frozen=True, slots=True)
class StepStats:
    """What the run summary reads from the steps table."""

    num_steps: int
    memory: dict[str, float]       # time-averaged pool share per category (sim.io.results.memory_breakdown)
    held_slots_peak: int
    saved_fraction: float          # mean share of blocks saved by sharing (paged pools; else 0)


def step_stats(steps: pd.DataFrame, block_size: int, paged: bool) -> StepStats:
    """The summary's step figures from a whole steps frame: the sums a :class:`StepSink`
    folds a streamed run into, row by row (:mod:`sim.io.step_fold`), so both give the same bits."""
    acc = StepSums(block_size)
    acc.add_records(steps)
    return stats_of(acc, paged)


def stats_of(acc: StepSums, paged: bool) -> StepStats:
    """The summary's step figures from folded sums."""
    n = acc.n
    if n == 0:
        return StepStats(0, {c.removesuffix("_slots"): 0.0 for c in MEM_CATS}, 0, 0.0)
    w, wshare, share, held_peak, saved = acc.totals()
    mem = {c.removesuffix("_slots"): wshare[i] / w if w > 0 else share[i] / n for i, c in enumerate(MEM_CATS)}
    return StepStats(n, mem, held_peak, saved / n if paged else 0.0)


class StepSink:
    """Drains step logs by chunks into running summary sums and, with ``path``, a Parquet file."""

    def __init__(self, path: Path | None = None, block_size: int = 16, chunk: int | None = None,
                 keep_ends: bool = False) -> None:
        self.path, self.block_size, self.chunk = path, block_size, chunk or CHUNK
        self._sums = StepSums(block_size)
        self._ends: list[np.ndarray] | None = [] if keep_ends else None  # the API server's egress needs them
        self._pending: np.ndarray | None = None   # drained rows short of a whole chunk
        self._writer: Any = None

    def maybe_drain(self, log: StepLog) -> None:
        if len(log) >= self.chunk:
            self.drain(log)

    def drain(self, log: StepLog, final: bool = False) -> None:
        """Take every row the log holds (emptying it in place); fold and write whole chunks
        (and, with ``final``, the remainder). Without a file to write, the log folds what it
        holds straight into the sums (:meth:`StepLog.fold_into`: no record array is built)."""
        if self.path is None:
            log.fold_into(self._sums, self._ends)
            return
        a = log.take()
        if a is not None:
            self._sums.add_records(a)  # (sequential sums: the chunks below need not be folded apart)
            if self._ends is not None:
                self._ends.append(record_ends(a))
            self._pending = a if self._pending is None else concat_steps([self._pending, a])
        p = self._pending
        if p is None:
            return
        whole = len(p) if final else len(p) - len(p) % self.chunk
        if whole:
            self._write(p[:whole])
        self._pending = p[whole:] if whole < len(p) else None

    def ends(self) -> np.ndarray:
        """The step ends drained so far (``keep_ends``), in step order."""
        return np.concatenate(self._ends) if self._ends else np.zeros(0)

    def _write(self, a: np.ndarray) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: a[c] for c in STEP_COLUMNS})
        if self._writer is None:
            assert self.path is not None
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.path, table.schema)
        self._writer.write_table(table)

    def close(self, log: StepLog, paged: bool) -> StepStats:
        """Drain what is left, finish the file (an empty table if no step ran) and return the
        summary's step figures."""
        self.drain(log, final=True)
        if self.path is not None:
            if self._writer is None:
                StepLog().frame().to_parquet(self.path, index=False)
            else:
                self._writer.close()
                self._writer = None
        return stats_of(self._sums, paged)


def write_requests(reqs: Sequence[Request], path: Path, chunk: int | None = None,
                   extra: dict[str, np.ndarray] | None = None) -> None:
    """``requests.parquet`` in uid order, ``chunk`` rows at a time (same rows and types as
    ``request_frame(reqs).to_parquet``); ``extra``: more columns, one value per request, appended
    in their order (the API server's, :mod:`sim.frontend.stage`)."""
    extra = extra or {}
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    chunk = chunk or CHUNK
    if not reqs:
        request_frame([]).assign(**{k: v[:0] for k, v in extra.items()}).to_parquet(path, index=False)
        return
    writer: Any = None
    try:
        for i in range(0, len(reqs), chunk):
            part = list(reqs[i:i + chunk])
            frame = request_frame(part)
            # parent uids index the whole list, not the chunk
            frame["parent_id"] = pd.Series([reqs[r.parent].request_id if r.parent >= 0 else None for r in part],
                                           dtype="str")
            for name, col in extra.items():
                frame[name] = col[i:i + chunk]
            table = pa.Table.from_pandas(frame, preserve_index=False,
                                         schema=None if writer is None else writer.schema)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
