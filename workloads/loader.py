"""Format detection and dispatch to the per-format readers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from sim.errors import TraceError
from workloads.schema import Trace, validate

FORMATS = ("normalized", "azure", "mooncake")


def _head_line(path: Path) -> str:
    with path.open("r", errors="replace") as f:
        return f.readline().strip()


def detect_format(path: Path) -> str:
    """Guess the format from the file's first line (or Parquet schema)."""
    if path.suffix == ".parquet":
        return "normalized"
    head = _head_line(path)
    if head.startswith("{"):
        try:
            obj = json.loads(head)
        except json.JSONDecodeError:
            raise TraceError(str(path), 1, None, "line 1 looks like JSON but does not parse") from None
        if "hash_ids" in obj and "input_length" in obj:
            return "mooncake"
        return "normalized"
    cols = [c.strip() for c in head.split(",")]
    if cols[:3] == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        return "azure"
    if "arrival_s" in cols:
        return "normalized"
    raise TraceError(str(path), 1, None, f"unrecognised trace format (header {head[:80]!r}); pass --format")


def _read_azure(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df["source_line"] = range(2, len(df) + 2)
    ts = df["TIMESTAMP"].str.slice(0, 26)  # 7 fractional digits -> 6
    t = pd.to_datetime(ts, format="%Y-%m-%d %H:%M:%S.%f", errors="coerce")
    if t.isna().any():
        i = int(t.isna().to_numpy().nonzero()[0][0])
        raise TraceError(str(path), i + 2, "TIMESTAMP", f"bad timestamp {df['TIMESTAMP'].iloc[i]!r}")
    out = pd.DataFrame({
        "arrival_s": (t - t.iloc[0]).dt.total_seconds() if len(t) else [],
        "prompt_tokens": df["ContextTokens"],
        "output_tokens": df["GeneratedTokens"],
        "source_line": df["source_line"],
    })
    return out


def _read_jsonl(path: Path) -> list[dict[str, object]]:
    rows = []
    with path.open() as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceError(str(path), ln, None, f"invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(str(path), ln, None, "expected a JSON object")
            obj["source_line"] = ln
            rows.append(obj)
    return rows


def _read_mooncake(path: Path) -> pd.DataFrame:
    rows = _read_jsonl(path)
    for r in rows:
        for k in ("timestamp", "input_length", "output_length", "hash_ids"):
            if k not in r:
                raise TraceError(str(path), int(r["source_line"]), k, "missing")  # type: ignore[call-overload]
    df = pd.DataFrame(rows)
    return pd.DataFrame({
        "arrival_s": pd.to_numeric(df["timestamp"], errors="coerce") / 1000.0,
        "prompt_tokens": df["input_length"],
        "output_tokens": df["output_length"],
        "hash_ids": df["hash_ids"],
        "tokens_per_hash": 512,
        "source_line": df["source_line"],
    })


def _read_normalized(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if _head_line(path).startswith("{"):
        return pd.DataFrame(_read_jsonl(path))
    df = pd.read_csv(path)
    df["source_line"] = range(2, len(df) + 2)
    return df


def load_trace(path: str | Path, fmt: str | None = None, skip_bad: bool = False) -> Trace:
    """Read a trace file in any supported format into a validated :class:`Trace`."""
    p = Path(path)
    if not p.exists():
        raise TraceError(str(p), None, None, "no such file")
    fmt = fmt or detect_format(p)
    readers = {"azure": _read_azure, "mooncake": _read_mooncake, "normalized": _read_normalized}
    if fmt not in readers:
        raise TraceError(str(p), None, None, f"unknown --format {fmt!r} (one of {', '.join(readers)})")
    df = readers[fmt](p)
    df = validate(df, str(p))
    return Trace(df=df, path=str(p), format=fmt)
