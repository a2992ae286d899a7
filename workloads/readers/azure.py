"""Azure LLM inference traces (2023 Splitwise; the 2024 week-long files share the columns).

``TIMESTAMP`` is a naive wall-clock string with 7 fractional digits, e.g.
``2023-11-16 18:17:03.9799600``; we cut it to 6 (microseconds) before parsing.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from workloads.readers.base import ReadContext, Reader
from workloads.rows import Col, check_columns, iter_csv, require_columns

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_FMT = "%Y-%m-%d %H:%M:%S.%f"


def sniff(head: str) -> bool:
    return [c.strip() for c in head.split(",")][:3] == list(COLUMNS)


def _epoch_s(ts: pd.Series) -> np.ndarray:
    """Seconds since 1970 as float64 (NaN where unparseable). float64 keeps ~0.4 us here."""
    s = ts.str.strip()
    # Some writers drop the fraction at whole seconds; accept both forms.
    s = s.where(s.str.contains(".", regex=False), s + ".0")
    t = pd.to_datetime(s.str.slice(0, 26), format=_FMT, errors="coerce")
    ns = t.to_numpy(dtype="datetime64[ns]").astype("int64")
    out = ns / 1e9
    out[t.isna().to_numpy()] = np.nan
    return out


def read(ctx: ReadContext) -> Iterator[pd.DataFrame]:
    cols = [Col("arrival_s", "TIMESTAMP", "float", -np.inf),
            Col("prompt_tokens", "ContextTokens"), Col("output_tokens", "GeneratedTokens")]
    for raw, lines in iter_csv(ctx.path, ctx.bad):
        require_columns(ctx.path, list(raw.columns), COLUMNS)
        secs = _epoch_s(raw["TIMESTAMP"])
        bad_ts = np.isnan(secs)
        for i in np.flatnonzero(bad_ts):
            ctx.bad.report(int(lines[i]), "TIMESTAMP", f"bad timestamp {raw['TIMESTAMP'].iloc[i]!r}")
        raw = raw[~bad_ts].reset_index(drop=True).assign(TIMESTAMP=secs[~bad_ts])
        yield check_columns(raw, cols, lines[~bad_ts], ctx.bad)


READER = Reader("azure", sniff, read, rebase=True, columns=COLUMNS)
