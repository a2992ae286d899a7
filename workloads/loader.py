"""Format detection and dispatch to the per-format readers in ``workloads.readers``.

Detection looks at content, not the file name: Parquet and xz magic bytes, then the first
line (a CSV header or a JSON object). ``--format`` overrides it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import TraceError
from workloads.detect import HEAD_BYTES, content_problem, header_columns, nearest_format
from workloads.readers import azure, burstgpt, lengths, mooncake, normalized, vidur
from workloads.readers.base import ReadContext, Reader, ReadOptions
from workloads.resolution import timestamp_resolution
from workloads.rows import BadRows
from workloads.schema import Trace, validate

# Order matters: the first reader whose sniff() accepts the header wins.
READERS: dict[str, Reader] = {r.name: r for r in (
    azure.READER, burstgpt.READER, mooncake.READER, vidur.READER, lengths.READER,
    normalized.READER)}
XZ_MAGIC = b"\xfd7zXZ\x00"
FORMATS = (*READERS, "servegen")


def _head(path: Path) -> tuple[bytes, str]:
    """(first bytes, first line) of ``path``; TraceError if it cannot be a trace (empty, binary)."""
    with path.open("rb") as f:
        raw = f.read(HEAD_BYTES)
    if not raw.startswith((normalized.PARQUET_MAGIC, XZ_MAGIC)):
        problem = content_problem(raw)
        if problem:
            raise TraceError(str(path), None, None, problem)
    line = raw.split(b"\n", 1)[0].decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    return raw[:8], line


def detect_format(path: str | Path) -> str:
    """Name of the format of ``path``, from its content. Raises TraceError when unknown."""
    p = Path(path)
    _exists(p)
    magic, head = _head(p)
    if magic.startswith(normalized.PARQUET_MAGIC):
        return "normalized"
    if magic.startswith(XZ_MAGIC):
        return "servegen"
    for r in READERS.values():
        if r.sniff(head):
            return r.name
    cols = header_columns(head)
    near = nearest_format(cols, READERS.values())
    if near is not None and near[1]:
        reader, missing = near
        raise TraceError(str(p), 1, missing[0], f"missing (the header looks like the {reader.name} format, "
                         f"which needs {', '.join(reader.columns)}; pass --format to force one)")
    kind = "a JSON object" if head.startswith("{") else "a header"
    raise TraceError(str(p), 1, None, f"unrecognised trace format ({kind} with {', '.join(cols[:8]) or 'no names'}); "
                     f"pass --format, one of {', '.join(FORMATS)}")


def _exists(p: Path) -> None:
    if not p.is_file():
        raise TraceError(str(p), None, None, "is a directory, not a trace file" if p.is_dir() else "no such file")


def _reader(p: Path, fmt: str | None) -> Reader:
    fmt = fmt or detect_format(p)
    if fmt not in READERS:
        raise TraceError(str(p), None, None, f"unknown --format {fmt!r} (one of {', '.join(FORMATS)})")
    return READERS[fmt]


def out_of_order_note(df: pd.DataFrame) -> str | None:
    """Say so when rows are not in arrival order (:func:`validate` sorts them), else None."""
    t = pd.to_numeric(df["arrival_s"], errors="coerce").to_numpy(dtype="float64")
    if len(t) < 2:
        return None
    late = t[1:] < np.fmax.accumulate(t)[:-1]  # arrives before a row above it
    if not late.any():
        return None
    i = int(np.flatnonzero(late)[0]) + 1
    where = f"line {int(df['source_line'].iloc[i])}" if "source_line" in df.columns else f"row {i + 1}"
    return (f"re-sorted by arrival time: {int(late.sum()):,} of {len(t):,} rows arrive before a row "
            f"above them (first at {where})")


def read_chunks(path: str | Path, fmt: str | None = None, skip_bad: bool = False,
                opts: ReadOptions | None = None) -> tuple[Reader, ReadContext, Iterator[pd.DataFrame]]:
    """Stream a file as normalized chunks (no sorting, no rebasing): for ``convert``.

    Returns the reader (its ``rebase`` flag says whether arrivals are absolute), the context
    (bad rows and notes fill in while iterating) and the chunk iterator.
    """
    p = Path(path)
    _exists(p)
    magic, _ = _head(p)  # empty or binary content: say so before a reader trips over it
    reader = _reader(p, fmt)
    if magic.startswith(normalized.PARQUET_MAGIC) and reader is not normalized.READER:
        raise TraceError(str(p), None, None, f"a Parquet file: --format {reader.name} reads text; "
                         "Parquet traces are --format normalized")
    ctx = ReadContext(p, BadRows(str(p), skip_bad), opts or ReadOptions())
    return reader, ctx, reader.read(ctx)


def load_trace(path: str | Path, fmt: str | None = None, skip_bad: bool = False,
               opts: ReadOptions | None = None) -> Trace:
    """Read a trace file in any supported format into a validated :class:`Trace`.

    ``fmt`` overrides detection. With ``skip_bad`` bad rows are dropped and listed in
    ``Trace.bad_rows``; otherwise the first one raises :class:`~sim.errors.TraceError`.
    ServeGen archives are built into a trace with ``opts.servegen`` (see ``workloads.servegen``).
    """
    p = Path(path)
    _exists(p)
    if (fmt or detect_format(p)) == "servegen":
        from workloads.servegen import load_servegen_trace
        return load_servegen_trace(p, opts or ReadOptions())
    reader, ctx, chunks = read_chunks(p, fmt, skip_bad, opts)
    parts = [c for c in chunks if len(c)]
    if not parts:
        raise TraceError(str(p), None, None,
                         "no valid requests" + (f" ({ctx.bad.count} bad rows)" if ctx.bad.count else ""))
    df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    if reader.rebase:
        df["arrival_s"] = df["arrival_s"] - float(np.min(df["arrival_s"].to_numpy()))
    order_note = out_of_order_note(df)
    df = validate(df, str(p))
    notes = tuple(ctx.notes) + ((order_note,) if order_note else ())
    if ctx.bad.count:
        notes += (f"skipped {ctx.bad.count} bad rows",)
    res = timestamp_resolution(df["arrival_s"].to_numpy())
    if res is not None and res.coarse:
        notes += (res.note(),)
    return Trace(df=df, path=str(p), format=reader.name, num_bad_rows=ctx.bad.count,
                 bad_rows=tuple(ctx.bad.messages), notes=notes)
