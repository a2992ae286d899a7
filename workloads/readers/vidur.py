"""Vidur's processed-trace CSV: ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens``.

Vidur writes pandas frames with their index, so an unnamed leading column is tolerated.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from workloads.readers.base import ReadContext, Reader
from workloads.rows import Col, check_columns, iter_csv, require_columns

COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")


def sniff(head: str) -> bool:
    return set(COLUMNS) <= {c.strip() for c in head.split(",")}


def read(ctx: ReadContext) -> Iterator[pd.DataFrame]:
    cols = [Col("arrival_s", "arrived_at", "float", 0),
            Col("prompt_tokens", "num_prefill_tokens"), Col("output_tokens", "num_decode_tokens")]
    for raw, lines in iter_csv(ctx.path, ctx.bad):
        require_columns(ctx.path, list(raw.columns), COLUMNS)
        yield check_columns(raw, cols, lines, ctx.bad)


READER = Reader("vidur", sniff, read, columns=COLUMNS)
