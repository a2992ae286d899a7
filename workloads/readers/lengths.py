"""Length-only tables (ShareGPT / arXiv stats from Vidur and Sarathi-Serve).

Columns ``num_prefill_tokens, num_decode_tokens[, num_total_tokens, pd_ratio]`` with no
timestamps: arrivals come from a separate process. ``ReadOptions.rate`` gives a seeded Poisson
process; without it every request arrives at t=0 (an offline batch).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from workloads.readers.base import ReadContext, Reader
from workloads.rows import Col, check_columns, iter_csv, require_columns

COLUMNS = ("num_prefill_tokens", "num_decode_tokens")


def sniff(head: str) -> bool:
    cols = {c.strip() for c in head.split(",")}
    return set(COLUMNS) <= cols and "arrived_at" not in cols


def read(ctx: ReadContext) -> Iterator[pd.DataFrame]:
    cols = [Col("prompt_tokens", "num_prefill_tokens"), Col("output_tokens", "num_decode_tokens")]
    rate = ctx.opts.rate
    rng = np.random.default_rng(ctx.opts.seed)
    t = 0.0
    for raw, lines in iter_csv(ctx.path, ctx.bad):
        require_columns(ctx.path, list(raw.columns), COLUMNS)
        df = check_columns(raw, cols, lines, ctx.bad)
        if rate is None:
            arrivals = np.zeros(len(df))
        else:
            arrivals = t + np.cumsum(rng.exponential(1.0 / rate, len(df)))
            if len(df):
                t = float(arrivals[-1])
        df.insert(0, "arrival_s", arrivals)
        yield df
    ctx.notes.append("no timestamps in file: " + (
        f"Poisson arrivals at {rate:g} req/s (seed {ctx.opts.seed})" if rate else "all requests arrive at t=0"))


READER = Reader("lengths", sniff, read, columns=COLUMNS)
