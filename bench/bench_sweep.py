"""Sweep throughput: points per minute on the Azure conv trace, local backend, 2 workers.

    .venv/bin/python bench/bench_sweep.py [--trace PATH] [--jobs 2]

Grid: gpu_memory_utilization {0.85, 0.9} x block_size {8, 16, 32, 64} (8 points), Llama-3.1-8B on
H100, roofline cost model. Wall time includes worker start-up (spawn) and Parquet writes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from sim.sweep import expand, run_sweep


def _shared() -> Path:
    """The optional data folder (traces/, gpu_profiles/): $KVSIM_DATA; unset, paths name it literally."""
    return Path(os.environ.get("KVSIM_DATA", "$KVSIM_DATA"))

TRACE = _shared() / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
GRID = {"gpu_memory_utilization": [0.85, 0.9], "block_size": [8, 16, 32, 64]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    points = expand(GRID, {"cost_model": "roofline"}, args.trace)
    with tempfile.TemporaryDirectory(prefix="bench_sweep") as d:
        t0 = time.perf_counter()
        run = run_sweep(points, Path(d), jobs=args.jobs)
        wall = time.perf_counter() - t0
    df = run.table
    print(f"trace {args.trace.name}: {int(df['num_requests'].iloc[0]):,} requests per point; "
          f"{len(points)} points, {run.failed} failed, jobs={args.jobs} (cpu_count {os.cpu_count()})")
    print(f"wall {wall:.1f} s; per-point simulate_s mean {df['simulate_s'].mean():.1f} s")
    print(f"sweep throughput: {60 * len(points) / wall:.2f} points/minute")


if __name__ == "__main__":
    main()
