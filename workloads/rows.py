"""Row-level plumbing shared by the readers: chunked CSV input, bad-row bookkeeping, coercion.

Readers never hold a whole file as Python objects: they pull ``CHUNK_ROWS`` rows at a time,
coerce them with vectorized pandas/numpy operations and yield normalized chunks. A bad value
either raises :class:`~sim.errors.TraceError` naming ``file:line`` (the default) or, with
``skip_bad``, is counted in :class:`BadRows` and its row dropped.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import TraceError

CHUNK_ROWS = 500_000
MAX_MESSAGES = 1000  # keep this many bad-row messages; the count covers them all


@dataclass(slots=True)
class BadRows:
    """Collects bad rows of one file. With ``skip=False`` the first bad row raises."""

    path: str
    skip: bool = False
    count: int = 0
    messages: list[str] = field(default_factory=list)

    def report(self, line: int | None, field_name: str | None, msg: str) -> None:
        err = TraceError(self.path, line, field_name, msg)
        if not self.skip:
            raise err
        self.count += 1
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(str(err))


@dataclass(frozen=True, slots=True)
class Col:
    """Coerce source column ``src`` into output column ``out``.

    ``kind`` is ``"float"`` or ``"int"``; values below ``minimum`` are bad rows.
    """

    out: str
    src: str
    kind: str = "int"
    minimum: float = 1


def check_columns(raw: pd.DataFrame, cols: Sequence[Col], lines: np.ndarray, bad: BadRows) -> pd.DataFrame:
    """Return a frame with the coerced ``cols`` and ``source_line``; bad rows reported.

    ``lines`` holds the 1-based file line of each row of ``raw``.
    """
    out: dict[str, np.ndarray] = {}
    first_bad = np.full(len(raw), -1, dtype=np.int64)  # index into cols of the first bad field
    for j, c in enumerate(cols):
        num = pd.to_numeric(raw[c.src], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        badm = ~np.isfinite(num)
        if c.kind == "int":
            badm |= np.floor(np.where(badm, 0, num)) != np.where(badm, 0, num)
        badm |= np.where(badm, False, num < c.minimum)
        first_bad[(first_bad < 0) & badm] = j
        out[c.out] = num
    rows = np.flatnonzero(first_bad >= 0)
    for i in rows:
        c = cols[int(first_bad[i])]
        val = raw[c.src].iloc[i]
        num = out[c.out][i]
        if val is None or (isinstance(val, float) and np.isnan(val)) or (isinstance(val, str) and not val.strip()):
            msg = "empty"
        elif np.isfinite(num) and (c.kind == "float" or num == np.floor(num)):
            msg = f"must be >= {c.minimum:g}, got {val!r}"
        else:
            msg = f"not a {'number' if c.kind == 'float' else 'whole number'}: {val!r}"
        bad.report(int(lines[i]), c.src, msg)
    keep = first_bad < 0
    df = pd.DataFrame({
        c.out: out[c.out][keep].astype("float64" if c.kind == "float" else "int64") for c in cols
    })
    df["source_line"] = lines[keep]
    return df


_SKIP_RE = re.compile(r"Skipping line (\d+): (.*)")


def iter_csv(path: Path, bad: BadRows, chunk_rows: int = CHUNK_ROWS,
             header: bool = True, names: Sequence[str] | None = None,
             ) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """Yield ``(chunk_of_strings, file_lines)`` from a CSV, ``chunk_rows`` rows at a time.

    Rows with the wrong number of fields are reported through ``bad`` with their line number;
    blank lines are ignored. Line numbers assume no quoted newlines, true of every trace format.
    """
    skipped: list[int] = []  # file lines pandas dropped, ascending
    row0 = 0  # rows yielded so far
    first_line = 2 if header else 1
    try:
        reader = pd.read_csv(
            path, dtype=str, keep_default_na=False, skip_blank_lines=False, chunksize=chunk_rows,
            on_bad_lines="warn" if bad.skip else "error", header=0 if header else None,
            names=list(names) if names else None, skipinitialspace=True,
        )
    except UnicodeDecodeError as e:
        raise TraceError(str(path), None, None, f"not a text file ({e.reason})") from None
    except pd.errors.EmptyDataError:
        raise TraceError(str(path), None, None, "empty file (no header, no rows)") from None
    it = iter(reader)
    while True:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                chunk = next(it)
            except StopIteration:
                break
            except pd.errors.ParserError as e:
                m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
                if m:
                    raise TraceError(str(path), int(m[2]), None,
                                     f"expected {m[1]} fields, saw {m[3]}") from None
                raise TraceError(str(path), None, None, f"CSV parse error: {e}") from None
            except UnicodeDecodeError as e:
                raise TraceError(str(path), None, None, f"not a text file ({e.reason})") from None
        for w in caught:
            for m in _SKIP_RE.finditer(str(w.message)):
                skipped.append(int(m[1]))
                bad.report(int(m[1]), None, m[2].strip())
        skipped.sort()
        n = len(chunk)
        lines = np.arange(row0, row0 + n, dtype=np.int64) + first_line
        if skipped:
            # shift every row past the dropped lines before it (fixed point over sorted list)
            sk = np.asarray(skipped, dtype=np.int64)
            for _ in range(len(sk) + 1):
                new = np.arange(row0, row0 + n, dtype=np.int64) + first_line + np.searchsorted(sk, lines, side="right")
                if np.array_equal(new, lines):
                    break
                lines = new
        row0 += n
        blank = (chunk == "").all(axis=1).to_numpy() if n else np.zeros(0, bool)
        if blank.any():
            chunk, lines = chunk[~blank], lines[~blank]
        yield chunk.reset_index(drop=True), lines


def require_columns(path: Path, have: Sequence[str], need: Sequence[str]) -> None:
    missing = [c for c in need if c not in have]
    if missing:
        raise TraceError(str(path), 1, missing[0], f"missing column (header has {', '.join(map(str, have))})")
