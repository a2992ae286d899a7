"""A day of traffic on a fleet: >= 1 M requests over 32 replicas, in bounded memory.

    KVSIM_DATA=DIR python bench/bench_day.py [--requests 1000000] [--replicas 32]
        [--router least-outstanding-tokens] [--hours 24] [--out DIR]

Traffic: the Azure 2023 conv trace spans one hour, so its arrival profile is the per-minute
rate over that hour; a Fourier series of order ``--order`` (least squares) fitted to it,
stretched over 24 hours, is the day's rate shape (one trace minute = 24 day minutes),
scaled so the day holds ``--requests`` arrivals. Arrivals are a non-homogeneous Poisson
process conditioned on that count (sorted uniform draws mapped through the inverse
cumulative rate); prompt and output lengths are drawn as pairs from the trace's rows. One
seeded numpy Generator (``--seed``) drives everything.

Replay: :func:`sim.cluster.stream_replay.replay_streamed` (steps drained by chunks; requests and
steps written as Parquet by chunks with ``--out``, else summary only). ``--hours H`` replays
only the first H hours (the day's arrivals before H), for a quick look. Prints wall time,
peak RSS (``resource.getrusage``), steps and the date. Target: <= 2 min, <= 4 GiB.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from record import emit

from sim.cluster.stream_replay import replay_streamed
from sim.config import make_config
from sim.cost.for_config import cost_model_for
from workloads import load_trace
from workloads.schema import Trace, validate

DAY_S = 86400.0


def default_trace() -> Path | None:
    data = os.environ.get("KVSIM_DATA")
    p = Path(data) / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv" if data else None
    return p if p is not None and p.exists() else None


def fit_shape(arrival_s: np.ndarray, bins: int, order: int) -> np.ndarray:
    """Fourier coefficients [a0, a1, b1, ...] of the rate per bin over the trace's span."""
    a = arrival_s - arrival_s[0]
    counts = np.bincount(np.minimum((a / (a[-1] + 1e-9) * bins).astype(np.int64), bins - 1), minlength=bins)
    x = (np.arange(bins) + 0.5) / bins
    return np.linalg.lstsq(_basis(x, order), counts / counts.mean(), rcond=None)[0]


def _basis(x: np.ndarray, order: int) -> np.ndarray:
    cols = [np.ones_like(x)]
    for k in range(1, order + 1):
        cols += [np.cos(2 * np.pi * k * x), np.sin(2 * np.pi * k * x)]
    return np.stack(cols, axis=1)


def day_trace(src: pd.DataFrame, n: int, order: int, seed: int, hours: float) -> tuple[Trace, np.ndarray]:
    rng = np.random.default_rng(seed)
    coef = fit_shape(src["arrival_s"].to_numpy(np.float64), 60, order)
    grid = np.linspace(0.0, 1.0, 24 * 60 * 4 + 1)                      # 15 s steps over the day
    rate = np.clip(_basis(grid, order) @ coef, 0.05, None)             # relative rate, never 0
    cum = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2)])
    arrivals = np.interp(np.sort(rng.random(n)) * cum[-1], cum, grid * DAY_S)
    rows = rng.integers(0, len(src), n)
    keep = arrivals < hours * 3600.0
    df = pd.DataFrame({"request_id": np.arange(n).astype(str)[keep], "arrival_s": arrivals[keep],
                       "prompt_tokens": src["prompt_tokens"].to_numpy(np.int64)[rows][keep],
                       "output_tokens": src["output_tokens"].to_numpy(np.int64)[rows][keep]})
    return Trace(df=validate(df, "<day>"), path="<day>", format="synthetic"), rate


def peak_rss_gib() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return kib / 2**20 if sys.platform != "darwin" else kib / 2**30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=default_trace())
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--replicas", type=int, default=32)
    ap.add_argument("--router", default="least-outstanding-tokens")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--record", type=Path, default=None, help="append the run's JSON record to this file")
    ap.add_argument("--compare-pausing", action="store_true",
                    help="replay again with lazy router reads off (windows pause at every arrival); print the ratio")
    args = ap.parse_args()
    if args.trace is None:
        raise SystemExit("no trace: set KVSIM_DATA (a folder with traces/azure_llm_2023/) or pass --trace")
    t0 = time.perf_counter()
    trace, rate = day_trace(load_trace(args.trace).df, args.requests, args.order, args.seed, args.hours)
    gen_s = time.perf_counter() - t0
    cfg = make_config(model=args.model, gpu=args.gpu)
    t1 = time.perf_counter()
    res = replay_streamed([cfg] * args.replicas, trace, args.router, args.out)
    wall = time.perf_counter() - t1
    mean = args.requests / DAY_S
    print(f"date {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores; load avg "
          f"{os.getloadavg()[0]:.1f}; {args.model} on {args.gpu}, {cfg.cost_model} cost model")
    print(f"day: {args.requests:,} requests (mean {mean:.1f} QPS, peak/trough {rate.max() / rate.min():.1f}x, "
          f"Fourier order {args.order}); replayed the first {args.hours:g} h: {res.num_requests:,} requests; "
          f"generated in {gen_s:.1f} s")
    print(f"{args.replicas} replicas, {args.router}: {res.num_finished:,} finished, {res.num_steps:,} steps, "
          f"{sum(res.preemptions):,} preemptions; TTFT p99 {res.ttft_s.p99:.3f} s, TPOT p99 {res.tpot_s.p99:.4f} s")
    print(f"wall {wall:.1f} s (target <= 120 s), peak RSS {peak_rss_gib():.2f} GiB (target <= 4 GiB)"
          + (f"; wrote {args.out}" if args.out else "; summary only"))
    figures = {"requests": args.requests, "hours": args.hours, "replayed": res.num_requests,
               "finished": res.num_finished, "replicas": args.replicas, "router": args.router,
               "model": args.model, "gpu": args.gpu, "steps": res.num_steps, "preemptions": sum(res.preemptions),
               "ttft_p99_s": round(res.ttft_s.p99, 4), "tpot_p99_s": round(res.tpot_s.p99, 5),
               "wall_s": round(wall, 1), "peak_rss_gib": round(peak_rss_gib(), 2), "generate_s": round(gen_s, 1),
               "summary_only": args.out is None}
    if args.compare_pausing:  # the same replay in this process, each replica pausing at every arrival
        t2 = time.perf_counter()
        paused = replay_streamed([cfg] * args.replicas, trace, args.router, None, lazy_reads=False)
        wall2 = time.perf_counter() - t2
        same = (paused.num_steps, paused.ttft_s, paused.tpot_s, paused.e2e_s) == (res.num_steps, res.ttft_s,
                                                                                    res.tpot_s, res.e2e_s)
        print(f"pausing at every arrival: {wall2:.1f} s, {wall2 / wall:.2f}x the lazy-read replay "
              f"({'the same' if same else 'DIFFERENT'} steps and percentiles)")
        figures |= {"pausing_wall_s": round(wall2, 1), "pausing_same": same}
    emit("bench_day", cost_model_for(cfg).name, figures, args.record)


if __name__ == "__main__":
    main()
