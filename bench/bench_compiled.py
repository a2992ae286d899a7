"""The compiled loops against their pure-Python references, as a ratio measured in one process.

The optional C twins (``sim/kv/_table_loops.c``, ...)
give the same results as the Python they replace; this bench times how much faster. The modules
compiled by Cython from their own source (``record.cython_modules``: the step fold, the run
layout) have no switch in a process: they run compiled on both sides (time them against a
``KVSIM_PURE_PYTHON=1`` process instead). It runs issue 19's 70B replica
(``--what engine``, ``simulate``) or its 8-replica fleet (``--what ROUTER``, ``replay_fleet``)
round by round in one process, switching every compiled loop on and off between runs (the
modules' selection attributes), the order alternating between rounds so a drift in machine
load favours neither side. Each run also checks that both sides ran the same steps.

    KVSIM_DATA=DIR python bench/bench_compiled.py [--what engine|ROUTER] [--rounds N] [--trace PATH]
        [--limit N] [--record FILE]

Skipped (exit 0) without the trace or without the compiled loops (not built, or
``KVSIM_PURE_PYTHON`` set).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from pathlib import Path
from typing import Any

from record import compiled_loops, compiled_switches, emit

from sim.cluster.replay import replay_fleet
from sim.cluster.router import parse_router
from sim.config.schema import make_config
from sim.cost.for_config import cost_model_for
from sim.errors import ConfigError
from sim.run.simulate import simulate
from workloads import load_trace

TRACE_IN_DATA = ("traces", "azure_llm_2023", "AzureLLMInferenceTrace_conv.csv")
CONFIG: dict[str, Any] = dict(model="llama-2-70b", gpu="a100-80gb", tensor_parallel_size=2, max_num_seqs=128,
                              block_size=16, max_model_len=4096)
SWITCHES = compiled_switches()
ON = [vars(owner)[attr] for _, owner, attr, _ in SWITCHES]  # as imported (a staticmethod as such)


def use_compiled(on: bool) -> None:
    """Every compiled loop on (as imported) or off (the pure-Python references)."""
    for (_, owner, attr, off), loop in zip(SWITCHES, ON, strict=True):
        setattr(owner, attr, loop if on else off)


def one(what: str, trace: Any) -> tuple[float, int]:
    """Wall time of one run and its steps."""
    t0 = time.perf_counter()
    if what == "engine":
        res = simulate(make_config(**CONFIG), trace)
        return time.perf_counter() - t0, res.summary.num_steps
    fleet = replay_fleet([make_config(**CONFIG)] * 8, trace, what)
    return time.perf_counter() - t0, sum(len(s) for s in fleet.steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", default="engine", help="engine, or a router for the 8-replica fleet")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=0, help="first N requests only")
    ap.add_argument("--record", type=Path, default=None)
    a = ap.parse_args()
    if a.rounds < 1:
        raise SystemExit("bench_compiled: --rounds must be >= 1")
    if a.limit < 0:
        raise SystemExit("bench_compiled: --limit must be >= 0 (0: every request)")
    if a.what != "engine":
        try:
            parse_router(a.what)
        except ConfigError as e:
            raise SystemExit(f"bench_compiled: --what is 'engine' or a router; {e}") from None
    path = a.trace or (Path(os.environ["KVSIM_DATA"]).joinpath(*TRACE_IN_DATA) if os.environ.get("KVSIM_DATA") else None)
    if path is None or not path.is_file():
        print(f"bench_compiled: skipped (no trace: {path or 'set KVSIM_DATA or pass --trace'})")
        return
    if len(compiled_loops()) < len(ON):
        print(f"bench_compiled: skipped (compiled loops in use: {compiled_loops() or 'none'}; all are needed)")
        return
    trace = load_trace(path)
    if a.limit:
        trace = dataclasses.replace(trace, df=trace.df.iloc[: a.limit].reset_index(drop=True))
    walls: dict[bool, list[float]] = {True: [], False: []}
    steps: set[int] = set()
    for r in range(a.rounds):
        for on in (True, False) if r % 2 == 0 else (False, True):
            use_compiled(on)
            wall, n = one(a.what, trace)
            walls[on].append(wall)
            steps.add(n)
    use_compiled(True)
    if len(steps) != 1:
        raise SystemExit(f"bench_compiled: MISMATCH, the two sides ran different steps: {sorted(steps)}")
    mean = {on: statistics.fmean(w) for on, w in walls.items()}
    for on in (True, False):
        print(f"{'compiled' if on else 'pure Python':12s} {' '.join(f'{w:.2f}' for w in walls[on])} s "
              f"(mean {mean[on]:.3f} s)")
    print(f"{a.what}: pure Python / compiled = {mean[False] / mean[True]:.3f} ({a.rounds} rounds, one process, "
          f"{steps.pop():,} steps each)")
    emit("bench_compiled", cost_model_for(make_config(**CONFIG)).name,
         {"what": a.what, "trace": path.name, "requests": len(trace.df), "rounds": a.rounds,
          "compiled_s": [round(w, 3) for w in walls[True]], "pure_s": [round(w, 3) for w in walls[False]],
          "ratio": round(mean[False] / mean[True], 3)}, a.record)


if __name__ == "__main__":
    main()
