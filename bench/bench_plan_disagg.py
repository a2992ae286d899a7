"""Time a 4-split `kvsim plan --disagg` on the first 15 minutes of Mooncake's conversation trace.

Issue 50: "A 4-split Mooncake plan --disagg on the first 15 minutes takes <= 3 min on 2 cores".
The trace is read from ``$KVSIM_DATA/traces/mooncake_fast25/conversation_trace.jsonl`` (or
``--trace``); its first 900 s (2,728 requests) are written to a temporary file. The plan:
Llama-3.1-8B on H100, TP 1, TTFT p90 <= 15 s, TPOT p90 <= 0.15 s, ``--disagg 4`` (unified and
1P3D, 2P2D, 3P1D, each with the tuned knob search), 2 local workers, routed validation and the
band edge included. Prints the wall time and one RECORD line (``--record FILE`` appends it).

    KVSIM_DATA=DIR python bench/bench_plan_disagg.py [--workers 2] [--record FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import emit

from sim.config import make_config
from sim.cost.for_config import cost_model_for

ROOT = Path(__file__).resolve().parents[1]
TRACE = ("traces", "mooncake_fast25", "conversation_trace.jsonl")
MINUTES = 15


def first_minutes(src: Path, dst: Path, minutes: float) -> int:
    """Copy the rows of ``src`` (Mooncake JSONL, ``timestamp`` in ms) before ``minutes``; their count."""
    n = 0
    with src.open() as f, dst.open("w") as g:
        for line in f:
            if json.loads(line)["timestamp"] >= minutes * 60_000:
                break
            g.write(line)
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = os.environ.get("KVSIM_DATA")
    ap.add_argument("--trace", type=Path, default=Path(data).joinpath(*TRACE) if data else None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--record", type=Path, default=None, help="append the run's JSON record to this file")
    a = ap.parse_args()
    if a.trace is None or not a.trace.exists():
        print("skipped: set KVSIM_DATA to the data folder (traces/mooncake_fast25/...) or pass --trace")
        return
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-plan-disagg-") as tmp:
        head = Path(tmp) / "mooncake_15min.jsonl"
        n = first_minutes(a.trace, head, MINUTES)
        cmd = [sys.executable, "-m", "sim.cli.main", "plan", str(head), "--gpu", "h100", "--slo-ttft-p90", "15",
               "--slo-tpot-p90", "0.15", "--disagg", "4", "--workers", str(a.workers), "--out", str(Path(tmp) / "plan")]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
    print(f"kvsim plan --disagg 4 on the first {MINUTES} min of Mooncake ({n:,} requests): {wall:.1f} s "
          f"({a.workers} workers, {os.cpu_count()} cores; target <= 180 s)")
    emit("bench_plan_disagg", cost_model_for(make_config(model="llama-3.1-8b", gpu="h100")).name,
         {"trace": a.trace.name, "requests": n, "workers": a.workers, "wall_s": round(wall, 1)}, a.record)


if __name__ == "__main__":
    main()
