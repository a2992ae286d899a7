"""Time `kvsim plan` on the Azure conv trace: Llama-3.1-8B, H100 / A100-80GB / L40S, TP 1-2.

Target: under 5 minutes on 2 cores with the local backend. The trace's own load (5.5 QPS) fits
on one replica of any of these, so the load is scaled x10 (55 QPS mean, 58 QPS peak) to make
the sizing non-trivial. Writes the bundle to reports/plan-azure-conv/ and prints the time.

    .venv/bin/python bench/bench_plan.py [--backend ray]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = Path(os.environ.get("KVSIM_DATA", "$KVSIM_DATA")) / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
OUT = Path("reports") / "plan-azure-conv"  # relative: the command runs in ROOT and the bundle names no machine path


def main() -> None:
    backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "local"
    cmd = [str(ROOT / ".venv" / "bin" / "kvsim"), "plan", str(TRACE), "--model", "llama-3.1-8b",
           "--gpu", "h100,a100-80gb,l40s", "--tp", "1,2", "--slo-ttft-p99", "1.0", "--slo-tpot-p99", "0.1",
           "--rate-scale", "10", "--backend", backend, "--workers", str(min(os.cpu_count() or 1, 2)),
           "--out", str(OUT if backend == "local" else OUT.with_name(OUT.name + "-ray"))]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    print(f"kvsim plan ({backend}, {os.cpu_count()} cores): {wall:.1f} s "
          f"({'PASS' if wall < 300 else 'FAIL'}: target < 300 s)")


if __name__ == "__main__":
    main()
