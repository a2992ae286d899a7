"""Time `kvsim plan` on the Azure 2023 conv trace: Llama-3.1-8B, H100 / A100-80GB / L40S, TP 1-2.

The trace's own load (5.5 QPS) fits on one replica of any of these, so the load is scaled
x10 (55 QPS mean, 58 QPS peak) to make the sizing non-trivial. Writes the bundle to
``--out`` (default reports/plan-azure-conv/) and prints the plan time, workers and the date.

    KVSIM_DATA=DIR python bench/bench_plan.py [--backend ray] [--workers 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

from record import emit

from sim.config import make_config
from sim.cost.for_config import cost_model_for

ROOT = Path(__file__).resolve().parents[1]
GPUS, TPS = ("h100", "a100-80gb", "l40s"), (1, 2)


def default_trace() -> Path | None:
    data = os.environ.get("KVSIM_DATA")
    p = Path(data) / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv" if data else None
    return p if p is not None and p.exists() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=default_trace())
    ap.add_argument("--backend", default="local")
    ap.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 2))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--record", type=Path, default=None, help="append the run's JSON record to this file")
    args = ap.parse_args()
    if args.trace is None:
        raise SystemExit("no trace: set KVSIM_DATA (a folder with traces/azure_llm_2023/) or pass --trace")
    out = args.out or Path("reports") / ("plan-azure-conv" + ("" if args.backend == "local" else "-ray"))  # runs in ROOT
    cmd = [sys.executable, "-m", "sim.cli.main", "plan", str(args.trace), "--model", "llama-3.1-8b",
           "--gpu", ",".join(GPUS), "--tp", ",".join(map(str, TPS)), "--slo-ttft-p99", "1.0", "--slo-tpot-p99", "0.1",
           "--rate-scale", "10", "--backend", args.backend, "--workers", str(args.workers), "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    data = os.environ.get("KVSIM_DATA")
    if data and args.out is None:  # the committed bundle names no machine's paths: the data folder as $KVSIM_DATA
        for name in ("inputs.yaml", "rerun.sh", "plan.md"):
            f = ROOT / out / name
            if f.exists():
                f.write_text(f.read_text().replace(str(Path(data)), "$KVSIM_DATA"))
    print(f"date {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores; load avg "
          f"{os.getloadavg()[0]:.1f}; {args.backend} backend, {args.workers} workers")
    print(f"kvsim plan: {wall:.1f} s (6 candidates x 3 seeds, band edge and routed validation included)")
    names = [cost_model_for(make_config(model="llama-3.1-8b", gpu=g, tensor_parallel_size=tp)).name
             for g in GPUS for tp in TPS]  # one cost model per GPU x TP
    emit("bench_plan", "; ".join(names),
         {"trace": args.trace.name, "grid": f"{','.join(GPUS)} x tp {','.join(map(str, TPS))}", "rate_scale": 10,
          "backend": args.backend, "workers": args.workers, "wall_s": round(wall, 1)}, args.record)


if __name__ == "__main__":
    main()
