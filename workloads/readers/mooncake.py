"""Mooncake (FAST'25) JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

Each hash id names one 512-token prefix block; equal ids are reusable KV blocks, so every row
must satisfy ``len(hash_ids) == ceil(input_length / 512)``. Many rows share a timestamp (the
conversation trace is quantized to ~3 s); they are kept as simultaneous arrivals.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pandas as pd

from workloads.readers.base import ReadContext, Reader
from workloads.readers.jsonl import iter_jsonl, parse_int_lists, require_fields
from workloads.rows import Col, check_columns

BLOCK = 512
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def sniff(head: str) -> bool:
    try:
        obj = json.loads(head)
    except json.JSONDecodeError:
        return False
    return isinstance(obj, dict) and {"input_length", "output_length"} <= obj.keys()


def read(ctx: ReadContext) -> Iterator[pd.DataFrame]:
    cols = [Col("arrival_s", "timestamp", "float", 0),
            Col("prompt_tokens", "input_length"), Col("output_tokens", "output_length")]
    for frame, lines in iter_jsonl(ctx.path, ctx.bad):
        frame, lines = require_fields(frame, lines, FIELDS, ctx.bad)
        hashes = frame["hash_ids"].copy()
        ok = parse_int_lists(hashes, lines, "hash_ids", ctx.bad)
        frame = frame.assign(hash_ids=hashes)[ok].reset_index(drop=True)
        df = check_columns(frame, cols, lines[ok], ctx.bad)
        df["arrival_s"] /= 1000.0
        idx = pd.Index(lines[ok]).get_indexer(df["source_line"])
        df["hash_ids"] = frame["hash_ids"].to_numpy()[idx]
        nblocks = df["hash_ids"].map(len).to_numpy()
        want = -(-df["prompt_tokens"].to_numpy() // BLOCK)
        for i in np.flatnonzero(nblocks != want):
            ctx.bad.report(int(df["source_line"].iloc[i]), "hash_ids",
                           f"has {nblocks[i]} blocks, expected ceil(input_length/{BLOCK}) = {want[i]}")
        df = df[nblocks == want].reset_index(drop=True)
        df["tokens_per_hash"] = np.int64(BLOCK)
        yield df


READER = Reader("mooncake", sniff, read, columns=FIELDS)
