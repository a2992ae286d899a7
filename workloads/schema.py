"""The normalized trace schema: the public interchange format of kvsim.

A trace is a table with one row per request. Column names are the public schema; other tools
write it as JSONL, CSV or Parquet.

=================  =========  ========  ==================================================
column             type       required  meaning
=================  =========  ========  ==================================================
arrival_s          float64    yes       arrival time in seconds from the trace start
prompt_tokens      int64      yes       prompt length (>= 1)
output_tokens      int64      yes       tokens to generate (>= 1)
request_id         string     no        defaults to the row index
hash_ids           list[int]  no        Mooncake-style prefix block hashes
tokens_per_hash    int64      no        tokens covered by one hash id (Mooncake: 512)
prompt_token_ids   list[int]  no        explicit prompt token ids (len == prompt_tokens)
priority           int64      no        lower value = scheduled first (vLLM priority policy)
n                  int64      no        parallel samples (default 1)
beam_width         int64      no        beam search width (default 1 = no beam search)
session_id         string     no        multi-turn: the conversation (with ``turn``)
turn               int64      no        0 or 1, then 1, 2, ... within a session, none missing
think_time_s       float64    no        seconds after the previous turn's last token
=================  =========  ========  ==================================================

With ``think_time_s`` a trace is a closed-loop session trace: a session's next turn is sent
when the turn before has finished plus its think time (:mod:`sim.run.clients`), and its
``arrival_s`` only orders the rows. Without it ``session_id`` and ``turn`` are labels (``kvsim
trace gen``'s multi-turn traces, which carry their own arrival times).

In memory a trace is a :class:`Trace`: a pandas DataFrame with these columns (optional ones
may be absent) sorted by ``arrival_s``, plus provenance. ``source_line`` (1-based line of the
row in its file) is kept when known so errors can name it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sim.errors import TraceError

REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")
#: what a "missing" error adds, so the user learns the schema from the error itself
SCHEMA_HINT = ("the normalized schema needs arrival_s, prompt_tokens, output_tokens; optional: request_id, "
               "hash_ids, tokens_per_hash, prompt_token_ids, priority, n, beam_width (README: Trace schema)")
OPTIONAL_INT = ("tokens_per_hash", "priority", "n", "beam_width")
OPTIONAL_LIST = ("hash_ids", "prompt_token_ids")
SESSION_COLUMNS = ("session_id", "turn", "think_time_s")
COLUMNS = (*REQUIRED, "request_id", *OPTIONAL_LIST, *OPTIONAL_INT, *SESSION_COLUMNS)
OPTIONAL_DEFAULTS = {"priority": 0, "n": 1, "beam_width": 1}
DEFAULT_TOKENS_PER_HASH = 512  # Mooncake's block; used when hash_ids come without tokens_per_hash


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded, validated trace."""

    df: pd.DataFrame
    path: str
    format: str
    num_bad_rows: int = 0
    bad_rows: tuple[str, ...] = field(default=())  # one message per skipped row (--skip-bad)
    notes: tuple[str, ...] = field(default=())  # what the reader did (filters, dropped rows)

    @property
    def num_requests(self) -> int:
        return len(self.df)

    @property
    def content_hash(self) -> str:
        """:func:`content_hash` of the frame: part of every sweep point's key, and recorded in
        summary.json and the plan bundle so a result names the exact trace it came from."""
        return content_hash(self.df)


def content_hash(df: pd.DataFrame) -> str:
    """Stable hash of the schema columns (values, not object identities).

    Numeric columns hash their bytes. Other columns hash the ``repr`` of their values: the raw
    bytes of an object or string column are pointers, different on every load. List cells held
    as numpy arrays go through ``tolist()`` so their repr is plain ints (``list(arr)`` would
    give ``np.int64(5)`` under numpy 2 and ``5`` under numpy 1).
    """
    h = hashlib.sha256()
    for col in (c for c in COLUMNS if c in df.columns):
        h.update(col.encode())
        s = df[col]
        if pd.api.types.is_numeric_dtype(s.dtype):
            h.update(np.ascontiguousarray(s.to_numpy()).tobytes())
        else:
            h.update(repr([v.tolist() if isinstance(v, np.ndarray) else v for v in s.tolist()]).encode())
    return h.hexdigest()[:16]


def _line_of(df: pd.DataFrame, i: int) -> int | None:
    if "source_line" in df.columns:
        return int(df["source_line"].iloc[i])
    return None


def validate(df: pd.DataFrame, path: str) -> pd.DataFrame:
    """Check types and ranges; return the frame sorted by arrival with defaults filled.

    Raises TraceError naming the file, line and field of the first bad value.
    """
    for col in REQUIRED:
        if col not in df.columns:
            raise TraceError(path, None, col, f"missing required column ({SCHEMA_HINT})")
    df = df.reset_index(drop=True)
    for col in ("arrival_s", *REQUIRED[1:], *[c for c in OPTIONAL_INT if c in df.columns]):
        if col in OPTIONAL_DEFAULTS:
            # an empty cell in an optional column means "the default" (mixed JSONL rows)
            df[col] = df[col].where(df[col].notna(), OPTIONAL_DEFAULTS[col])
        num = pd.to_numeric(df[col], errors="coerce")
        bad = num.isna() | ~np.isfinite(num.astype("float64"))
        if col != "arrival_s":
            bad |= num.fillna(0) != np.floor(num.fillna(0))
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise TraceError(path, _line_of(df, i), col, f"not a {'number' if col == 'arrival_s' else 'whole number'}: {df[col].iloc[i]!r}")
        df[col] = num.astype("float64" if col == "arrival_s" else "int64")
    checks = [
        ("arrival_s", df["arrival_s"] < 0, "must be >= 0"),
        ("prompt_tokens", df["prompt_tokens"] < 1, "must be >= 1"),
        ("output_tokens", df["output_tokens"] < 1, "must be >= 1"),
    ]
    for col in ("n", "beam_width", "tokens_per_hash"):
        if col in df.columns:
            checks.append((col, df[col] < 1, "must be >= 1"))
    for col, mask, msg in checks:
        if mask.any():
            i = int(np.flatnonzero(mask.to_numpy())[0])
            raise TraceError(path, _line_of(df, i), col, f"{msg}, got {df[col].iloc[i]!r}")
    if "hash_ids" in df.columns and "tokens_per_hash" not in df.columns:
        df["tokens_per_hash"] = np.int64(DEFAULT_TOKENS_PER_HASH)
    if "prompt_token_ids" in df.columns:
        lens = df["prompt_token_ids"].map(lambda v: len(v) if isinstance(v, (list, tuple, np.ndarray)) else -1)
        bad = lens.to_numpy() != df["prompt_tokens"].to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TraceError(path, _line_of(df, i), "prompt_token_ids", f"length {lens.iloc[i]} != prompt_tokens {df['prompt_tokens'].iloc[i]}")
    if "request_id" not in df.columns:
        df["request_id"] = [str(i) for i in range(len(df))]
    else:
        df["request_id"] = df["request_id"].astype(str)
        dup = df["request_id"].duplicated()
        if dup.any():
            i = int(np.flatnonzero(dup.to_numpy())[0])
            raise TraceError(path, _line_of(df, i), "request_id", f"duplicate id {df['request_id'].iloc[i]!r}")
    if "think_time_s" in df.columns:
        df = check_sessions(df, path)
    order = np.argsort(df["arrival_s"].to_numpy(), kind="stable")
    if not np.all(order == np.arange(len(df))):
        df = df.iloc[order].reset_index(drop=True)
    return df


def _fail(df: pd.DataFrame, path: str, mask: np.ndarray, col: str, msg: str) -> None:
    if mask.any():
        i = int(np.flatnonzero(mask)[0])
        raise TraceError(path, _line_of(df, i), col, f"{msg}, got {df[col].iloc[i]!r}")


def check_sessions(df: pd.DataFrame, path: str) -> pd.DataFrame:
    """The session columns: both ids given, whole turns >= 0 starting at 0 or 1 with none missing
    or repeated in a session, think times finite and >= 0."""
    for col in ("session_id", "turn"):
        if col not in df.columns:
            raise TraceError(path, None, col, "missing: a session trace needs session_id and turn")
    if df["session_id"].isna().any():
        _fail(df, path, df["session_id"].isna().to_numpy(), "session_id", "empty")
    df["session_id"] = df["session_id"].astype(str)
    turn = pd.to_numeric(df["turn"], errors="coerce")
    _fail(df, path, (turn.isna() | (turn.fillna(1) != np.floor(turn.fillna(1))) | (turn.fillna(1) < 0)).to_numpy(),
          "turn", "must be a whole number >= 0")
    df["turn"] = turn.astype("int64")
    think = pd.to_numeric(df["think_time_s"], errors="coerce")
    _fail(df, path, (think.isna() | ~np.isfinite(think.fillna(0).astype("float64")) | (think.fillna(0) < 0)).to_numpy(),
          "think_time_s", "must be a number >= 0")
    df["think_time_s"] = think.astype("float64")
    order = np.lexsort((df["turn"].to_numpy(), df["session_id"].to_numpy()))
    expect = np.empty(len(df), np.int64)
    sid = df["session_id"].to_numpy()[order]
    starts = np.concatenate(([True], sid[1:] != sid[:-1]))
    idx = np.arange(len(df))
    first = np.maximum.accumulate(np.where(starts, idx, 0))
    base = np.minimum(df["turn"].to_numpy()[order][first], 1)  # a session starts at turn 0 or 1
    expect[order] = idx - first + base
    bad = df["turn"].to_numpy() != expect
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(path, _line_of(df, i), "turn", f"session {df['session_id'].iloc[i]!r}: turn "
                         f"{df['turn'].iloc[i]} where turn {expect[i]} is expected (a turn missing or repeated)")
    return df


def has_sessions(df: pd.DataFrame) -> bool:
    """The trace is multi-turn: it has every session column (README: Trace schema)."""
    return set(SESSION_COLUMNS) <= set(df.columns)
