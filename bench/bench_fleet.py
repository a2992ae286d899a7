"""Routed-fleet speed: 8 replicas of Llama-2-70B (2x A100-80GB, TP 2 each) on the full Azure
2023 conv trace, in one SimPy environment.

Issue 18's target is >= 20x Vidur's 8-replica loop (121 s on the issue's machine, not
re-measured here: Vidur cannot be fetched in this sandbox). Four runs in this one process, so
their ratios are measured under the same load:

- live KV-aware routing (llm-d's scorers, precise prefix view), fast-forward (the default);
- live least-outstanding-tokens, fast-forward;
- static round-robin, fast-forward (assigned up front: the lower bound of the routing cost);
- live KV-aware routing with ``--exact-steps`` (the reference; ``--skip-exact`` leaves it out).

The two live runs are bit-identical to their exact-stepped versions (tests/test_router_live.py).

Measured 2026-12-01 on the shared 2-core development machine, CPU seconds (wall was 1.5-2.8x
higher under other agents' load). Before merging main's one-window engine: kv-aware live 18.8 s,
least-outstanding live 18.6 s, round-robin static 9.1 s, kv-aware --exact-steps 30.3 s. After
(09:44 UTC): 18.4 s, 17.3 s, 10.5 s and 20.5 s -- the exact loop got faster, so live
fast-forward now gains only ~1.1x over exact stepping here. Live routing costs ~1.8x static:
every arrival ends every replica's window (any replica may receive it; ~19k arrivals x 8
replicas), and each replica then runs the step that straddles the arrival exactly, so windows
average ~3 steps.

The trace is found under ``$KVSIM_DATA/traces/azure_llm_2023/``; without it the bench says so
and exits.

    KVSIM_DATA=/path/to/data python bench/bench_fleet.py [--replicas 8] [--skip-exact]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

from sim.cluster.replay import replay_fleet
from sim.config.schema import make_config
from workloads import load_trace

VIDUR_8_REPLICAS_S = 121.0  # issue 18, one run on the machine
CONFIG = dict(model="llama-2-70b", gpu="a100-80gb", tensor_parallel_size=2, max_num_seqs=128,
              block_size=16, max_model_len=4096, cost_model="roofline")
RUNS = [("kv-aware (live)", "kv-aware", False), ("least-outstanding (live)", "least-outstanding-tokens", False),
        ("round-robin (static)", "round-robin", False), ("kv-aware --exact-steps", "kv-aware", True)]


def trace_path() -> Path | None:
    root = os.environ.get("KVSIM_DATA")
    if not root:
        return None
    p = Path(root) / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    return p if p.exists() else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--skip-exact", action="store_true")
    ap.add_argument("--trace", type=Path, default=None)
    a = ap.parse_args()
    path = a.trace or trace_path()
    if path is None:
        print("bench_fleet: set KVSIM_DATA to the folder holding traces/azure_llm_2023/ (skipped)")
        sys.exit(0)
    print(f"bench_fleet {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, python {sys.version.split()[0]}")
    trace = load_trace(path)
    print(f"{trace.num_requests:,} requests; {a.replicas} x Llama-2-70B on 2x A100-80GB TP 2 (roofline cost)")
    walls: dict[str, float] = {}
    for name, router, exact in RUNS:
        if exact and a.skip_exact:
            continue
        cfgs = [make_config(exact_steps=exact, **CONFIG)] * a.replicas
        t0, c0 = time.perf_counter(), time.process_time()
        res = replay_fleet(cfgs, trace, router)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        walls[name] = wall
        req = res.requests
        steps = sum(len(s) for s in res.steps)
        print(f"{name:26s} wall {wall:7.2f} s (cpu {cpu:6.2f} s) | steps {steps:,} (ff {res.ff_steps:,}) | "
              f"finished {int((req['status'] == 'finished').sum()):,} | prefix hit tokens "
              f"{int(req['prefix_hit_tokens'].clip(lower=0).sum()):,} | ttft p99 {req['ttft_s'].quantile(0.99):.3f} s | "
              f"vs Vidur 8-replica {VIDUR_8_REPLICAS_S / wall:5.1f}x")
    if "kv-aware --exact-steps" in walls:
        print(f"fast-forward speed-up with live kv-aware routing: "
              f"{walls['kv-aware --exact-steps'] / walls['kv-aware (live)']:.2f}x")


if __name__ == "__main__":
    main()
