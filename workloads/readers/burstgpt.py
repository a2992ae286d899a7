"""BurstGPT CSV: ``Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type``.

``Timestamp`` is seconds from the trace start. Rows with ``Response tokens == 0`` are failed
requests (the service returned nothing): they cannot be simulated as a request that decodes,
so they are dropped and counted in the trace's notes, never silently.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from workloads.readers.base import ReadContext, Reader
from workloads.rows import Col, check_columns, iter_csv, require_columns

COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")


def sniff(head: str) -> bool:
    cols = {c.strip() for c in head.split(",")}
    return {"Timestamp", "Request tokens", "Response tokens"} <= cols


def read(ctx: ReadContext) -> Iterator[pd.DataFrame]:
    cols = [Col("arrival_s", "Timestamp", "float", 0),
            Col("prompt_tokens", "Request tokens"),
            Col("output_tokens", "Response tokens", minimum=0)]
    models, logs = set(ctx.opts.models), set(ctx.opts.log_types)
    filtered = failed = 0
    for raw, lines in iter_csv(ctx.path, ctx.bad):
        require_columns(ctx.path, list(raw.columns), COLUMNS[:4] + COLUMNS[5:])
        keep = np.ones(len(raw), bool)
        if models:
            keep &= raw["Model"].str.strip().isin(models).to_numpy()
        if logs:
            keep &= raw["Log Type"].str.strip().isin(logs).to_numpy()
        filtered += int((~keep).sum())
        df = check_columns(raw[keep].reset_index(drop=True), cols, lines[keep], ctx.bad)
        zero = df["output_tokens"].to_numpy() == 0
        failed += int(zero.sum())
        yield df[~zero].reset_index(drop=True)
    if models or logs:
        ctx.notes.append(f"filtered out {filtered} rows by model/log type")
    ctx.notes.append(f"dropped {failed} failed requests (Response tokens == 0)")


READER = Reader("burstgpt", sniff, read, rebase=True, columns=COLUMNS[:4] + COLUMNS[5:])
