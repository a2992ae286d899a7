"""Crash-safe, resumable storage of sweep rows::

    DIR/parts/<key>.parquet    the rows that finished since the last flush (named by the first
                               one's key), written to a temp name, then renamed
    DIR/sweep.parquet          compaction of parts (atomic replace), then the parts are deleted

Rows are buffered and flushed at most every ``flush_s`` seconds (the first row at once) or
every ``flush_rows`` rows: a one-row Parquet file costs ~20 ms of the driver's CPU, which a
sweep of 1,000 points on 2 cores shares with its workers. A hard kill loses at most the
last second's rows, which a rerun redoes. A kill can also leave parts next to a sweep.parquet that already
holds them; compaction de-duplicates on ``key``, so rows are never lost or duplicated.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from sim.config.schema import SimConfig


class SweepStore:
    """``DIR/parts/<key>.parquet`` per finished point, compacted into ``DIR/sweep.parquet``."""

    def __init__(self, out: Path, flush_s: float = 1.0, flush_rows: int = 64) -> None:
        self.out, self.parts = out, out / "parts"
        self.parts.mkdir(parents=True, exist_ok=True)
        self.file = out / "sweep.parquet"
        self.flush_s, self.flush_rows = flush_s, flush_rows
        self._buf: list[dict[str, Any]] = []
        self._last = -float("inf")   # the first row is written at once

    def done(self) -> dict[str, str]:
        """key -> status of every recorded point (compacted or still a part)."""
        got: dict[str, str] = {}
        files = ([self.file] if self.file.exists() else []) + sorted(self.parts.glob("*.parquet"))
        for f in files:
            df = pd.read_parquet(f, columns=["key", "status"])
            got.update(zip(df["key"], df["status"], strict=True))
        return got

    def append(self, row: dict[str, Any]) -> None:
        """Record a row (written at the next flush: time, row count, or :meth:`flush`)."""
        self._buf.append(row)
        if len(self._buf) >= self.flush_rows or time.monotonic() - self._last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        self._last = time.monotonic()
        if not self._buf:
            return
        rows, self._buf = self._buf, []
        tmp = self.parts / f".{rows[0]['key']}.{os.getpid()}.tmp"
        pd.DataFrame(rows).to_parquet(tmp, index=False)
        os.replace(tmp, self.parts / f"{rows[0]['key']}.parquet")

    def compact(self, order: list[str] | None = None) -> pd.DataFrame:
        """Merge parts into sweep.parquet (latest row per key wins); return the table."""
        self.flush()
        frames, parts = [], sorted(self.parts.glob("*.parquet"))
        if self.file.exists():
            frames.append(pd.read_parquet(self.file))
        frames += [pd.read_parquet(f) for f in parts]
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True).drop_duplicates("key", keep="last")
        for c in _EVERY_TABLE:
            if c not in df:
                df[c] = None
        if order:
            rank = {k: i for i, k in enumerate(order)}
            df = df.assign(_o=df["key"].map(rank).fillna(len(rank))).sort_values("_o", kind="stable")
            df = df.drop(columns="_o")
        df = _typed_columns(df.reset_index(drop=True))
        tmp = self.out / f".sweep.{os.getpid()}.tmp"
        df.to_parquet(tmp, index=False)
        os.replace(tmp, self.file)
        for f in parts:
            f.unlink(missing_ok=True)
        return df


_DTYPES = {int: "Int64", int | None: "Int64", float: "float64", float | None: "float64",
           bool: "boolean", bool | None: "boolean"}
#: columns every table has, empty where no row has a value (an open loop's clients: row.py)
_EVERY_TABLE = ("max_concurrency",)
#: columns no SimConfig field types (metrics a failed point leaves empty; an open loop's clients)
_METRIC_DTYPES = {"max_concurrency": "Int64", "overloaded": "boolean", "backlog_at_last_arrival": "Int64", "overloaded_in_bursts": "boolean",
                  "queue_peak": "Int64"}


def _typed_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Option columns typed by their SimConfig field, whatever the order parts were merged in.

    A collapsed cell is None; a one-row part holding it has a null-typed column, so without
    this the merged dtype would depend on which part came first.
    """
    for c in df.columns:
        f = SimConfig.model_fields.get(c)
        dtype = _DTYPES.get(f.annotation) if f is not None else _METRIC_DTYPES.get(c)  # type: ignore[arg-type]
        if dtype is not None:
            col = df[c].astype(object).where(df[c].notna(), None)
            df[c] = pd.array(col.tolist(), dtype=dtype)
    return df
