"""Chunked JSON-lines input with 1-based line numbers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.rows import CHUNK_ROWS, BadRows


def iter_jsonl(path: Path, bad: BadRows, chunk_rows: int = CHUNK_ROWS,
               ) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """Yield ``(frame, lines)`` for up to ``chunk_rows`` objects at a time; blank lines skipped."""
    rows: list[dict[str, object]] = []
    lines: list[int] = []
    with path.open("rb") as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                bad.report(ln, None, f"invalid JSON ({getattr(e, 'msg', None) or e})")
                continue
            if not isinstance(obj, dict):
                bad.report(ln, None, f"expected a JSON object, got {type(obj).__name__}")
                continue
            rows.append(obj)
            lines.append(ln)
            if len(rows) >= chunk_rows:
                yield pd.DataFrame(rows), np.asarray(lines, dtype=np.int64)
                rows, lines = [], []
    if rows:
        yield pd.DataFrame(rows), np.asarray(lines, dtype=np.int64)


def require_fields(frame: pd.DataFrame, lines: np.ndarray, fields: tuple[str, ...],
                   bad: BadRows, what: str = "missing") -> tuple[pd.DataFrame, np.ndarray]:
    """Report rows missing any of ``fields`` (JSON objects may omit keys); return the rest.
    ``what`` is the message for each (the normalized reader names its schema there)."""
    missing = np.zeros(len(frame), bool)
    for k in fields:
        col = frame[k].isna().to_numpy() if k in frame.columns else np.ones(len(frame), bool)
        for i in np.flatnonzero(col & ~missing):
            bad.report(int(lines[i]), k, what)
        missing |= col
    return frame[~missing].reset_index(drop=True), lines[~missing]


def parse_int_lists(values: pd.Series, lines: np.ndarray, name: str, bad: BadRows) -> np.ndarray:
    """Validate a column of integer lists (JSON arrays or JSON strings); bad rows -> False mask."""
    ok = np.ones(len(values), bool)
    out: list[object] = []
    for i, v in enumerate(values.tolist()):
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                v = None
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            bad.report(int(lines[i]), name, "must be a list of integers")
            ok[i] = False
            out.append(None)
        else:
            out.append(v)
    values.iloc[:] = pd.Series(out, index=values.index, dtype=object)
    return ok
