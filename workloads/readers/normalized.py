"""The normalized schema (``workloads.schema``) as CSV, JSONL or Parquet.

CSV stores list columns (``hash_ids``, ``prompt_token_ids``) as JSON arrays in a quoted field.
Parquet rows have no text line; errors name the 1-based row instead (reported as the line).
Columns outside the schema are passed through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pandas as pd

from sim.errors import TraceError
from workloads.readers.base import ReadContext, Reader
from workloads.readers.jsonl import iter_jsonl, parse_int_lists, require_fields
from workloads.rows import CHUNK_ROWS, Col, check_columns, iter_csv
from workloads.schema import (
    DEFAULT_TOKENS_PER_HASH,
    OPTIONAL_DEFAULTS,
    OPTIONAL_INT,
    OPTIONAL_LIST,
    REQUIRED,
    SCHEMA_HINT,
)

PARQUET_MAGIC = b"PAR1"
_MIN = {"tokens_per_hash": 1, "n": 1, "beam_width": 1, "priority": -np.inf}


def sniff(head: str) -> bool:
    if head.startswith("{"):
        try:
            return "arrival_s" in json.loads(head)
        except json.JSONDecodeError:
            return False
    return "arrival_s" in {c.strip() for c in head.split(",")}


def _normalize(raw: pd.DataFrame, lines: np.ndarray, ctx: ReadContext) -> pd.DataFrame:
    raw, lines = require_fields(raw, lines, REQUIRED, ctx.bad, f"missing ({SCHEMA_HINT})")
    cols = [Col("arrival_s", "arrival_s", "float", 0), Col("prompt_tokens", "prompt_tokens"),
            Col("output_tokens", "output_tokens")]
    cols += [Col(c, c, "int", _MIN[c]) for c in OPTIONAL_INT if c in raw.columns]
    ok = np.ones(len(raw), bool)
    for c in OPTIONAL_LIST:
        if c in raw.columns:
            vals = raw[c].astype(object).copy()
            ok &= parse_int_lists(vals, lines, c, ctx.bad)
            raw[c] = vals
    raw, lines = raw[ok].reset_index(drop=True), lines[ok]
    for c, default in {**OPTIONAL_DEFAULTS, "tokens_per_hash": DEFAULT_TOKENS_PER_HASH}.items():
        if c in raw.columns:  # a JSON object that leaves out an optional key means its default
            raw[c] = raw[c].where(raw[c].notna(), default)
    df = check_columns(raw, cols, lines, ctx.bad)
    idx = pd.Index(lines).get_indexer(df["source_line"])
    known = {c.out for c in cols} | {"source_line"}
    for c in raw.columns:
        if c not in known:
            df[c] = raw[c].to_numpy()[idx]
    if "request_id" in df.columns:
        df["request_id"] = df["request_id"].astype(str)
    return _check_hash_coverage(df, ctx)


def _check_hash_coverage(df: pd.DataFrame, ctx: ReadContext) -> pd.DataFrame:
    """Report (and drop) rows whose ``hash_ids`` cover fewer tokens than the prompt.

    A prompt block past the last id would have no content of its own and would falsely share
    KV with every other request's uncovered blocks; Mooncake's reader checks the same.
    """
    if "hash_ids" not in df.columns or not len(df):
        return df
    tph = (df["tokens_per_hash"].to_numpy() if "tokens_per_hash" in df.columns
           else np.full(len(df), DEFAULT_TOKENS_PER_HASH, dtype=np.int64))
    ids = df["hash_ids"].map(len).to_numpy(dtype=np.int64)
    prompt = df["prompt_tokens"].to_numpy()
    short = ids * tph < prompt
    for i in np.flatnonzero(short):
        ctx.bad.report(int(df["source_line"].iloc[i]), "hash_ids",
                       f"{ids[i]} ids x tokens_per_hash {tph[i]} cover {ids[i] * tph[i]} tokens, fewer than "
                       f"prompt_tokens {prompt[i]} (needs at least {-(-prompt[i] // tph[i])} ids)")
    return df[~short].reset_index(drop=True) if short.any() else df


def read(ctx: ReadContext) -> Iterator[pd.DataFrame]:
    with ctx.path.open("rb") as f:
        magic = f.read(4)
    if magic == PARQUET_MAGIC:
        import pyarrow.parquet as pq  # lazy: keeps `trace info` on CSV fast

        try:
            pf = pq.ParquetFile(ctx.path)
        except Exception as e:  # pyarrow raises several types for corrupt files
            raise TraceError(str(ctx.path), None, None, f"unreadable Parquet ({e})") from None
        row0 = 1
        for batch in pf.iter_batches(batch_size=CHUNK_ROWS):
            raw = batch.to_pandas()
            lines = np.arange(row0, row0 + len(raw), dtype=np.int64)
            row0 += len(raw)
            yield _normalize(raw.drop(columns=["source_line"], errors="ignore"), lines, ctx)
        return
    if magic.lstrip().startswith(b"{"):
        for raw, lines in iter_jsonl(ctx.path, ctx.bad):
            yield _normalize(raw, lines, ctx)
        return
    for raw, lines in iter_csv(ctx.path, ctx.bad):
        yield _normalize(raw.replace("", np.nan).infer_objects(), lines, ctx)


READER = Reader("normalized", sniff, read, columns=REQUIRED)
