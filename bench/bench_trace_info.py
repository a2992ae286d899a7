"""Benchmark: ``kvsim trace info`` on the Azure conv trace must finish in under 2 s.

Runs the real CLI in a fresh interpreter (imports included) and prints wall time.
Usage: .venv/bin/python bench/bench_trace_info.py [TRACE]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

DEFAULT = Path(os.environ.get("KVSIM_DATA", "$KVSIM_DATA"), "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
LIMIT_S = 2.0


def main() -> int:
    trace = sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sim.cli.main", "trace", "info", trace, "--json"],
                       check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    best, worst = min(times), max(times)
    print(f"kvsim trace info {Path(trace).name}: best {best:.2f} s, worst {worst:.2f} s "
          f"(limit {LIMIT_S:.1f} s) -> {'OK' if worst < LIMIT_S else 'TOO SLOW'}")
    return 0 if worst < LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
