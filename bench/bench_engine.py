"""Engine speed on the Azure 2023 conv trace, in the configuration of Vidur's anchor run.

Vidur (github.com/microsoft/vidur) replays this trace (19,366 requests, one hour) for one
replica of Llama-2-70B on 2x A100 (TP 2), vLLM scheduler, batch cap 128, block_size 16, in
about 23 s on a 2-core machine (~850 simulated requests per wall second; figure from the
issue, not re-measured here: Vidur cannot be fetched in this sandbox). kvsim does the same
with real block identities and prefix caching. Both kvsim modes (fast-forward, the default,
and --exact-steps) run in this one process so their ratio is measured under the same load.

    python bench/bench_engine.py [--trace PATH] [--skip-exact]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from sim.config.schema import make_config
from sim.run.simulate import simulate
from workloads import load_trace


def _shared() -> Path:
    """The optional data folder (traces/, gpu_profiles/): $KVSIM_DATA; unset, paths name it literally."""
    return Path(os.environ.get("KVSIM_DATA", "$KVSIM_DATA"))

VIDUR_ANCHOR_S = 23.0
DEFAULT_TRACE = _shared() / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
CONFIG = dict(model="llama-2-70b", gpu="a100-80gb", tensor_parallel_size=2, max_num_seqs=128,
              block_size=16, max_model_len=4096, cost_model="roofline")


def run(trace, exact: bool) -> dict[str, float]:
    cfg = make_config(exact_steps=exact, **CONFIG)
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(cfg, trace)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = res.summary
    return {"wall_s": wall, "cpu_s": cpu, "requests": s.num_requests, "finished": s.num_finished,
            "steps": s.num_steps, "ff_steps": s.fast_forward_steps,
            "preemptions": s.preemptions, "kv_usage": s.kv_usage_mean,
            "req_per_s": s.num_requests / wall, "steps_per_s": s.num_steps / wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--skip-exact", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    trace = load_trace(a.trace)
    print(f"load: {time.perf_counter() - t0:.2f} s, {trace.num_requests:,} requests")
    rows = [("fast-forward (default)", run(trace, exact=False))]
    if not a.skip_exact:
        rows.append(("--exact-steps", run(trace, exact=True)))
    for name, r in rows:
        print(f"{name:24s} wall {r['wall_s']:6.2f} s (cpu {r['cpu_s']:5.2f} s) | {r['req_per_s']:8.0f} simulated req/s | "
              f"{r['steps_per_s']:8.0f} steps/s | steps {r['steps']:,} (ff {r['ff_steps']:,}) | "
              f"finished {r['finished']:,} | preemptions {r['preemptions']:,} | KV use {100 * r['kv_usage']:.1f}%")
    ff = rows[0][1]
    print(f"vs Vidur's ~{VIDUR_ANCHOR_S:.0f} s anchor (quoted, not re-measured): {VIDUR_ANCHOR_S / ff['wall_s']:.1f}x")
    if len(rows) > 1:
        print(f"fast-forward speed-up over --exact-steps (same process): {rows[1][1]['wall_s'] / ff['wall_s']:.1f}x")


if __name__ == "__main__":
    main()
