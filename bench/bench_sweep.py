"""Sweep throughput: points per minute on the Azure 2023 conv trace, local backend.

    KVSIM_DATA=DIR python bench/bench_sweep.py [--points 1000] [--jobs 2] [--trace PATH]

The grid is gpu_memory_utilization {0.50 .. 0.95 by 0.05} x block_size {8, 16, 32, 64} x
max_num_seqs {64, 128, 256, 384, 512} x max_num_batched_tokens {2048 .. 32768} (1,000 points)
over the default configuration (Llama-3.1-8B on H100, calibrated cost model). ``--points N``
takes the first N of a seeded shuffle of that grid, so a smaller run samples all of it.
Wall time includes worker start-up (spawn), trace loading in each worker and the Parquet
writes. Points that differ only in pool knobs and whose capacity decisions cannot differ are
derived from one simulated point (:mod:`sim.sweep.derive`): prints how many were simulated and
derived, points/minute, workers and date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from record import emit

from sim.config import make_config
from sim.cost.for_config import cost_model_for
from sim.sweep import expand, run_sweep
from sim.sweep.point import Point

GRID = {"gpu_memory_utilization": [round(0.5 + 0.05 * i, 2) for i in range(10)],
        "block_size": [8, 16, 32, 64], "max_num_seqs": [64, 128, 256, 384, 512],
        "max_num_batched_tokens": [2048, 4096, 8192, 16384, 32768]}


def default_trace() -> Path | None:
    data = os.environ.get("KVSIM_DATA")
    p = Path(data) / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv" if data else None
    return p if p is not None and p.exists() else None


def points(trace: Path, n: int) -> list[Point]:
    every = expand(GRID, {}, trace)   # the product, in order; nothing collapses (paged)
    order = np.random.default_rng(0).permutation(len(every))
    return [every[i] for i in order[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=default_trace())
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--record", type=Path, default=None, help="append the run's JSON record to this file")
    args = ap.parse_args()
    if args.trace is None:
        raise SystemExit("no trace: set KVSIM_DATA (a folder with traces/azure_llm_2023/) or pass --trace")
    t0 = time.perf_counter()
    pts = points(args.trace, args.points)
    plan_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="bench_sweep") as d:
        t1 = time.perf_counter()
        run = run_sweep(pts, Path(d), jobs=args.jobs)
        wall = time.perf_counter() - t1
    df = run.table
    ok = df[df["status"] == "ok"]
    print(f"date {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores; jobs={args.jobs}")
    print(f"trace {args.trace.name}: {int(ok['num_requests'].iloc[0]):,} requests per point; "
          f"{len(pts)} points, {run.failed} failed; planning the grid {plan_s:.1f} s")
    derived = ok["derived_from"].fillna("").astype(bool) if "derived_from" in ok else ok["key"].isna()
    sim, der = ok[~derived], ok[derived]
    print(f"simulated {len(sim)} points (mean wall {sim['wall_s'].mean():.2f} s, simulate "
          f"{sim['simulate_s'].mean():.2f} s); derived {len(der)} from them (sim/sweep/derive.py"
          + (f", mean wall {der['wall_s'].mean():.3f} s)" if len(der) else ")"))
    print(f"total {wall:.1f} s ({wall / 60:.1f} min) -> {60 * len(pts) / wall:.1f} points/minute; "
          f"1,000 points would take {1000 * wall / len(pts) / 60:.1f} min (target <= 10 min)")
    emit("bench_sweep", cost_model_for(make_config()).name,
         {"trace": args.trace.name, "requests_per_point": int(ok["num_requests"].iloc[0]), "points": len(pts),
          "failed": run.failed, "jobs": args.jobs, "simulated": len(sim), "derived": len(der),
          "simulated_mean_s": round(float(sim["wall_s"].mean()), 2),
          "derived_mean_s": round(float(der["wall_s"].mean()), 3) if len(der) else None,
          "wall_s": round(wall, 1), "points_per_min": round(60 * len(pts) / wall, 1)}, args.record)


if __name__ == "__main__":
    main()
