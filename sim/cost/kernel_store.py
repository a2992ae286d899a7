"""One GPU's aiconfigurator-core tables on disk: the manifest, the frames, built grids, labels.

The tables are committed under calibration/data/aic/ (calibration/aic/extract.py writes them;
README.md there gives columns and units). Frames are read on first use and grids built once per
slice, so a process pays the parquet read only for the operators it asks about.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import ConfigError

DATA_DIR = Path(__file__).resolve().parents[2] / "calibration" / "data" / "aic"
US = 1e-6
LN_US = math.log(US)
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "bfloat16", "float16": "bfloat16", "half": "bfloat16",
                 "auto": "bfloat16", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8"}


@dataclass(frozen=True, slots=True)
class Lookup:
    """Seconds per call of one operator on one GPU, and where the number came from."""

    seconds: float
    extrapolated: bool
    note: str


@cache
def manifest() -> dict[str, Any]:
    """calibration/data/aic/manifest.json, or an empty manifest when the folder is absent."""
    path = DATA_DIR / "manifest.json"
    if not path.is_file():
        return {"package": "aiconfigurator-core", "package_version": "?", "gpus": {}}
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def canonical_dtype(dtype: str) -> str:
    d = dtype.lower()
    return DTYPE_ALIASES.get(d, d)


@dataclass(slots=True)
class Store:
    """Frames and built grids of one GPU (live state: caches fill on first use)."""

    gpu: str
    meta: dict[str, Any]
    package_version: str
    _frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    _built: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def has(self, table: str) -> bool:
        return table in self.meta["tables"]

    def version(self, table: str) -> str:
        return str(self.meta["tables"][table]["version"])

    def label(self, table: str) -> str:
        """'aiconfigurator-core 0.12.0, vLLM 0.24.0 tables, h100_sxm' for one table."""
        def make() -> str:
            e = self.meta["tables"][table]
            runtime = "NCCL" if e["framework"] == "nccl" else "vLLM"
            return f"aiconfigurator-core {self.package_version}, {runtime} {e['version']} tables, {self.meta['system']}"
        text: str = self.built(("label", table), make)
        return text

    def frame(self, table: str) -> pd.DataFrame:
        if table not in self._frames:
            if not self.has(table):
                have = ", ".join(sorted(self.meta["tables"])) or "none"
                raise ConfigError(f"kernel tables: {self.gpu} has no '{table}' table "
                                  f"(aiconfigurator-core {self.package_version} has: {have})")
            # one thread: the tables are small, and pyarrow's pool costs ~20 ms to start in a fresh process
            self._frames[table] = pd.read_parquet(DATA_DIR / self.gpu / f"{table}.parquet", use_threads=False)
        return self._frames[table]

    def built(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """Cache one built grid (or plan, label, ...) under ``key``."""
        hit = self._built.get(key)
        if hit is None:
            hit = self._built[key] = make()
        return hit

    def choices(self, table: str, column: str) -> tuple[str, ...]:
        return self.built((table, "choices", column),
                          lambda: tuple(sorted(map(str, self.frame(table)[column].unique()))))

    def pick(self, table: str, column: str, value: str) -> str:
        """A categorical value the table holds (dtypes by their kvsim alias too), else ConfigError."""
        hit = self._built.get((table, "pick", column, value))
        if hit is not None:
            return str(hit)
        v = self._pick(table, column, value)
        self._built[(table, "pick", column, value)] = v
        return v

    def _pick(self, table: str, column: str, value: str) -> str:
        have = self.choices(table, column)
        v = canonical_dtype(value) if "dtype" in column and value not in have else value
        if v not in have:
            raise ConfigError(f"kernel tables: {self.gpu} '{table}' has no {column} '{value}' "
                              f"(measured: {', '.join(have)})")
        return v
