"""Reading what the plot commands take (run directories, sweep tables) with one-line errors.

A missing path, a directory where a file belongs, a file that is not Parquet or JSON, or a
table that is not kvsim's: each is a :class:`~sim.errors.ConfigError` naming the path and
what was expected, never a pyarrow traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import ConfigError
from sim.plots.common import RunInfo, info_from_summary

SWEEP_FILE = "sweep.parquet"
SWEEP_HINT = "expected the sweep.parquet that `kvsim sweep --out DIR` writes"
RUN_HINT = "expected a `kvsim simulate --out DIR` directory"


def read_parquet(path: Path, hint: str) -> pd.DataFrame:
    if not path.exists():
        raise ConfigError(f"{path}: no such file ({hint})")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory ({hint})")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"PAR1":
        raise ConfigError(f"{path}: not a Parquet file ({hint})")
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable Parquet ({type(e).__name__}; {hint})") from None


def read_sweep(path: Path) -> pd.DataFrame:
    """The table of a sweep: ``path`` is the sweep.parquet or the directory holding it."""
    if path.is_dir() and (path / SWEEP_FILE).is_file():
        path = path / SWEEP_FILE
    df = read_parquet(path, SWEEP_HINT)
    missing = [c for c in ("key", "status", "model") if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: not a kvsim sweep table (no {missing[0]!r} column; {SWEEP_HINT})")
    if not (df["status"] == "ok").any():
        raise ConfigError(f"{path}: no successful sweep point to plot ({len(df)} failed)")
    return df


def read_summary(run_dir: Path) -> dict[str, Any]:
    f = run_dir / "summary.json"
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: {'no such directory' if not run_dir.exists() else 'not a directory'} ({RUN_HINT})")
    if not f.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no summary.json; {RUN_HINT})")
    try:
        s = json.loads(f.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{f}: not valid JSON ({e})") from None
    if not isinstance(s, dict) or not {"config", "trace", "cost_model", "memory"} <= s.keys():
        raise ConfigError(f"{f}: not a kvsim summary (written by `kvsim simulate`)")
    return s


def read_run(run_dir: Path) -> tuple[RunInfo, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """(info, steps, requests, summary) of a ``kvsim simulate --out`` directory."""
    s = read_summary(run_dir)
    steps = read_parquet(run_dir / "steps.parquet", RUN_HINT)
    req = read_parquet(run_dir / "requests.parquet", RUN_HINT)
    return info_from_summary(s), steps, req, s
