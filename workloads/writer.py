"""Write a normalized trace frame as Parquet, CSV or JSONL (chosen by the output suffix)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim.errors import ConfigError
from workloads.schema import OPTIONAL_LIST

SUFFIXES = (".parquet", ".csv", ".jsonl")
INTERNAL = ("source_line",)  # bookkeeping columns that are not part of the schema


def output_kind(out: Path) -> str:
    if out.suffix not in SUFFIXES:
        raise ConfigError(f"{out}: output must end in one of {', '.join(SUFFIXES)}")
    return out.suffix[1:]


def to_arrow(df: pd.DataFrame) -> pa.Table:
    """Arrow table of the schema columns; list columns as list<int64>."""
    df = df.drop(columns=[c for c in INTERNAL if c in df.columns])
    table = pa.Table.from_pandas(df, preserve_index=False)
    for c in OPTIONAL_LIST:
        if c in table.column_names:
            i = table.column_names.index(c)
            table = table.set_column(i, c, table.column(c).cast(pa.list_(pa.int64())))
    return table


def _jsonable(v: object) -> object:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def write_trace(df: pd.DataFrame, out: Path) -> None:
    """Write ``df`` to ``out``; nothing else is written."""
    kind = output_kind(out)
    if kind == "parquet":
        pq.write_table(to_arrow(df), out)
        return
    df = df.drop(columns=[c for c in INTERNAL if c in df.columns])
    if kind == "csv":
        df = df.copy()
        for c in OPTIONAL_LIST:
            if c in df.columns:
                df[c] = [json.dumps(_jsonable(v)) for v in df[c]]
        df.to_csv(out, index=False)
        return
    with out.open("w") as f:
        for rec in df.to_dict(orient="records"):
            f.write(json.dumps({k: _jsonable(v) for k, v in rec.items()}) + "\n")
