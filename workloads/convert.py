"""Streaming conversion of any trace format to normalized Parquet.

Chunks go straight from the reader to a ``ParquetWriter``: memory stays bounded by the chunk
size, not the file. Only if the input turns out unsorted (or needs rebasing to an earlier
minimum) is the written file read back as Arrow columns, sorted and rewritten in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.errors import TraceError
from workloads.loader import read_chunks
from workloads.readers.base import ReadOptions
from workloads.writer import to_arrow


@dataclass(frozen=True, slots=True)
class ConvertResult:
    rows: int
    num_bad_rows: int
    bad_rows: tuple[str, ...]
    notes: tuple[str, ...]
    resorted: bool


def convert(path: str | Path, out: str | Path, fmt: str | None = None, skip_bad: bool = False,
            opts: ReadOptions | None = None) -> ConvertResult:
    """Write ``path`` as normalized Parquet at ``out``; returns what happened."""
    reader, ctx, chunks = read_chunks(path, fmt, skip_bad, opts)
    out = Path(out)
    writer: pq.ParquetWriter | None = None
    rows, origin, last, lowest, ordered = 0, None, -np.inf, np.inf, True
    try:
        for df in chunks:
            if not len(df):
                continue
            t = df["arrival_s"].to_numpy()
            if reader.rebase:
                origin = float(t[0]) if origin is None else origin
                t = t - origin
                df["arrival_s"] = t
            ordered &= bool(t[0] >= last and np.all(np.diff(t) >= 0))
            last, lowest = float(t[-1]), min(lowest, float(t.min()))
            table = to_arrow(df)
            if "request_id" not in table.column_names:
                ids = pa.array(np.arange(rows, rows + len(df), dtype=np.int64)).cast(pa.string())
                table = table.append_column("request_id", ids)
            if writer is None:
                writer = pq.ParquetWriter(out, table.schema)
            writer.write_table(table.cast(writer.schema))
            rows += len(df)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        raise TraceError(str(path), None, None, "no valid requests")
    resorted = not ordered or lowest < 0
    if resorted:
        table = pq.read_table(out, memory_map=False)
        table = table.take(pc.sort_indices(table, [("arrival_s", "ascending")]))
        if reader.rebase:
            i = table.column_names.index("arrival_s")
            table = table.set_column(i, "arrival_s", pc.subtract(table.column("arrival_s"), lowest))
        pq.write_table(table, out)
    notes = tuple(ctx.notes) + ((f"skipped {ctx.bad.count} bad rows",) if ctx.bad.count else ())
    return ConvertResult(rows, ctx.bad.count, tuple(ctx.bad.messages), notes, resorted)
