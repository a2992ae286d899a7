"""Benchmark: converting a 10-million-row trace to Parquet stays under 2 GiB of RSS.

Writes a synthetic Azure-format CSV (10M rows, ~390 MB) to a temporary directory, then runs
``kvsim trace convert`` in a child process and reads the child's peak RSS with
``resource.getrusage(RUSAGE_CHILDREN)``. The generator process itself is not measured.
Usage: .venv/bin/python bench/bench_convert_rss.py [ROWS]
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

LIMIT_BYTES = 2 * 1024**3


def write_azure_csv(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    start = np.datetime64("2024-05-12T00:00:00", "ns")
    t = 0.0
    with path.open("w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for lo in range(0, rows, 1_000_000):
            n = min(1_000_000, rows - lo)
            secs = t + np.cumsum(rng.exponential(1 / 50.0, n))
            t = float(secs[-1])
            ts = pd.Series(start + (secs * 1e9).astype("timedelta64[ns]")).dt.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
            chunk = pd.DataFrame({"TIMESTAMP": ts, "ContextTokens": rng.integers(1, 8000, n),
                                  "GeneratedTokens": rng.integers(1, 1000, n)})
            chunk.to_csv(f, header=False, index=False)


def main() -> int:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "big.csv", Path(tmp) / "big.parquet"
        t0 = time.perf_counter()
        write_azure_csv(src, rows)
        print(f"wrote {rows:,} rows, {src.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sim.cli.main", "trace", "convert", str(src), str(out)], check=True)
        wall = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
        n = len(pd.read_parquet(out, columns=["arrival_s"]))
    ok = peak < LIMIT_BYTES and n == rows
    print(f"convert: {wall:.1f} s, peak RSS {peak / 1024**2:.0f} MiB (limit {LIMIT_BYTES / 1024**3:.0f} GiB), "
          f"{n:,} rows in Parquet -> {'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
