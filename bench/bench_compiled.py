"""The compiled build against the same source run as Python, as a ratio measured side by side.

Every compiled module is built by Cython from its own ``.py`` (``record.cython_modules``), so
there is nothing to switch inside one process: each run is a fresh interpreter, compiled or with
``KVSIM_PURE_PYTHON=1`` (the ``.py`` files imported instead), the order alternating between rounds
so a drift in machine load favours neither side. It runs issue 19's 70B replica (``--what
engine``, ``simulate``) or its 8-replica fleet (``--what ROUTER``, ``replay_fleet``). Each run
also checks that both sides ran the same steps.

    KVSIM_DATA=DIR python bench/bench_compiled.py [--what engine|ROUTER] [--rounds N] [--trace PATH]
        [--limit N] [--record FILE]

Skipped (exit 0) without the trace or without the compiled modules (not built, or
``KVSIM_PURE_PYTHON`` set).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_engine import CONFIG, TRACE_IN_DATA
from record import compiled_loops, cython_modules, emit

MARK = "BENCH_COMPILED "


def one(what: str, path: Path, limit: int) -> tuple[float, int]:
    """Wall time of one run (trace loaded first, not timed) and its steps."""
    import dataclasses

    from sim.cluster.replay import replay_fleet
    from sim.config.schema import make_config
    from sim.run.simulate import simulate
    from workloads import load_trace

    trace = load_trace(path)
    if limit:
        trace = dataclasses.replace(trace, df=trace.df.iloc[:limit].reset_index(drop=True))
    t0 = time.perf_counter()
    if what == "engine":
        res = simulate(make_config(**CONFIG), trace)
        return time.perf_counter() - t0, res.summary.num_steps
    fleet = replay_fleet([make_config(**CONFIG)] * 8, trace, what)
    return time.perf_counter() - t0, sum(len(s) for s in fleet.steps)


def side(compiled: bool, a: argparse.Namespace, path: Path) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if k != "KVSIM_PURE_PYTHON"}
    if not compiled:
        env["KVSIM_PURE_PYTHON"] = "1"
    p = subprocess.run([sys.executable, __file__, "--worker", "--what", a.what, "--trace", str(path),
                        "--limit", str(a.limit)], env=env, capture_output=True, text=True)
    got = [x for x in p.stdout.splitlines() if x.startswith(MARK)]
    if p.returncode != 0 or not got:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bench_compiled: the {'compiled' if compiled else 'pure-Python'} run failed: {last}")
    wall, n = json.loads(got[0][len(MARK):])
    return float(wall), int(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", default="engine", help="engine, or a router for the 8-replica fleet")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=0, help="first N requests only")
    ap.add_argument("--record", type=Path, default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rounds < 1:
        raise SystemExit("bench_compiled: --rounds must be >= 1")
    if a.limit < 0:
        raise SystemExit("bench_compiled: --limit must be >= 0 (0: every request)")
    path = a.trace or (Path(os.environ["KVSIM_DATA"]).joinpath(*TRACE_IN_DATA) if os.environ.get("KVSIM_DATA") else None)
    if a.worker:
        print(MARK + json.dumps(one(a.what, Path(str(path)), a.limit)))
        return
    if a.what != "engine":
        from sim.cluster.router import parse_router
        from sim.errors import ConfigError
        try:
            parse_router(a.what)
        except ConfigError as e:
            raise SystemExit(f"bench_compiled: --what is 'engine' or a router; {e}") from None
    if path is None or not path.is_file():
        print(f"bench_compiled: skipped (no trace: {path or 'set KVSIM_DATA or pass --trace'})")
        return
    if len(compiled_loops()) < len(cython_modules()):
        print(f"bench_compiled: skipped (compiled loops in use: {compiled_loops() or 'none'}; all are needed)")
        return
    walls: dict[bool, list[float]] = {True: [], False: []}
    steps: set[int] = set()
    for r in range(a.rounds):
        for on in (True, False) if r % 2 == 0 else (False, True):
            wall, n = side(on, a, path)
            walls[on].append(wall)
            steps.add(n)
    if len(steps) != 1:
        raise SystemExit(f"bench_compiled: MISMATCH, the two sides ran different steps: {sorted(steps)}")
    mean = {on: statistics.fmean(w) for on, w in walls.items()}
    for on in (True, False):
        print(f"{'compiled' if on else 'pure Python':12s} {' '.join(f'{w:.2f}' for w in walls[on])} s "
              f"(mean {mean[on]:.3f} s)")
    print(f"{a.what}: pure Python / compiled = {mean[False] / mean[True]:.3f} ({a.rounds} rounds, fresh processes, "
          f"{steps.pop():,} steps each)")
    from sim.config.schema import make_config
    from sim.cost.for_config import cost_model_for
    emit("bench_compiled", cost_model_for(make_config(**CONFIG)).name,
         {"what": a.what, "trace": path.name, "limit": a.limit, "rounds": a.rounds,
          "compiled_s": [round(w, 3) for w in walls[True]], "pure_s": [round(w, 3) for w in walls[False]],
          "ratio": round(mean[False] / mean[True], 3)}, a.record)


if __name__ == "__main__":
    main()
