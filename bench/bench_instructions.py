"""Instructions, not seconds: a replay's CPU instructions per request and per step (callgrind).

Wall time on these shared 2-core machines moves by up to 40 % within an hour; the number of
instructions a run executes does not (hash seed fixed: two runs of the day's 0.1 h on the same
code counted replays of 4.737 G each, under 0.01 % apart, on 2026-12-04). This
bench runs a slice of a speed bench twice under ``valgrind --tool=callgrind``: once stopping
just before the replay (imports, trace, configuration, and a warm-up replay of its first 50
requests: the *setup*) and once through it. The difference is what the replay executed::

    instructions(full) - instructions(setup) = replay;   replay / requests,  replay / steps

Compare two versions of the code by running it on each. Instructions are not time: a live
router interleaves its replicas at every arrival, and on the 8-replica fleet that cost 46-60 %
more wall time than static round-robin for 5 % more instructions (cache misses; the README's
Speed section), so check a change that moves memory traffic with a same-run wall-time ratio too.

    KVSIM_DATA=DIR python bench/bench_instructions.py [--what day|engine|fleet] [--hours 0.1]
        [--limit 3000] [--router least-outstanding-tokens] [--record FILE]

``day``: the first ``--hours`` of bench_day's day (32 x Llama-3.1-8B on H100, summary only).
``engine``: the first ``--limit`` requests of bench_engine's configuration (one replica).
``fleet``: the first ``--limit`` requests on bench_fleet's 8 replicas behind ``--router``.
About 50x slower than native: the defaults take 2-4 minutes. Skipped (exit 0) without
valgrind or without the trace.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import bench_day
from record import emit

HERE = Path(__file__).resolve().parent
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
MARK = "INNER "
WARM = 50  # requests replayed in both runs first (imports, caches, first calls: not the replay's)


def collected(stderr: str) -> int:
    """The instruction count callgrind reports at exit (``==PID== Collected : N``)."""
    m = COLLECTED.findall(stderr)
    if not m:
        raise RuntimeError("callgrind reported no instruction count:\n" + stderr[-2000:])
    return int(m[-1])


def inner(what: str, trace: Path, hours: float, limit: int, router: str, setup_only: bool) -> dict[str, Any]:
    """Set up the slice and replay a few of its requests (imports and first calls warmed, in
    both runs); unless ``setup_only``, replay the slice. Return what the slice holds."""
    import dataclasses

    from sim.config.schema import make_config
    from sim.cost.for_config import cost_model_for
    from workloads import load_trace

    src = load_trace(trace)
    if what == "day":
        from sim.cluster.stream_replay import replay_streamed
        tr, _ = bench_day.day_trace(src.df, 1_000_000, 3, 0, hours)
        warm = dataclasses.replace(tr, df=tr.df.iloc[:WARM].reset_index(drop=True))
        cfgs = [make_config(model="llama-3.1-8b", gpu="h100")] * 32
        run: Any = lambda t: replay_streamed(cfgs, t, "least-outstanding-tokens", None).num_steps  # noqa: E731
    else:
        tr = dataclasses.replace(src, df=src.df.iloc[:limit].reset_index(drop=True))
        warm = dataclasses.replace(src, df=src.df.iloc[:WARM].reset_index(drop=True))
        if what == "engine":
            import bench_engine

            from sim.run.simulate import simulate
            cfgs = [make_config(**bench_engine.CONFIG)]
            run = lambda t: simulate(cfgs[0], t).summary.num_steps  # noqa: E731
        else:
            import bench_fleet

            from sim.cluster.replay import replay_fleet
            cfgs = [make_config(**bench_fleet.CONFIG)] * 8
            run = lambda t: sum(len(s) for s in replay_fleet(cfgs, t, router).steps)  # noqa: E731
    run(warm)
    steps = 0 if setup_only else run(tr)
    return {"requests": len(tr.df), "steps": steps, "cost_model": cost_model_for(cfgs[0]).name}


def under_callgrind(args: list[str]) -> tuple[int, dict[str, Any]]:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, str(Path(__file__).resolve()), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    if p.returncode != 0:
        raise SystemExit(f"bench_instructions: the run under callgrind failed ({p.returncode}):\n{p.stderr[-2000:]}")
    line = next(x for x in p.stdout.splitlines() if x.startswith(MARK))
    return collected(p.stderr), json.loads(line[len(MARK):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", choices=("day", "engine", "fleet"), default="day")
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--hours", type=float, default=0.1, help="day: replay the first H hours")
    ap.add_argument("--limit", type=int, default=3000, help="engine, fleet: the first N requests")
    ap.add_argument("--router", default="least-outstanding-tokens", help="fleet: the router")
    ap.add_argument("--record", type=Path, default=None, help="append the run's JSON record to this file")
    ap.add_argument("--inner", choices=("setup", "full"), default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.hours <= 0 or a.limit < 1:
        raise SystemExit(f"bench_instructions: --hours must be > 0 and --limit >= 1 (got {a.hours:g}, {a.limit})")
    if a.trace is not None and not a.trace.is_file():
        raise SystemExit(f"bench_instructions: --trace {a.trace}: no such file")
    trace = a.trace or bench_day.default_trace()
    if trace is None:
        print("bench_instructions: skipped (set KVSIM_DATA to the data folder, or pass --trace)")
        return
    if a.inner is not None:
        print(MARK + json.dumps(inner(a.what, trace, a.hours, a.limit, a.router, a.inner == "setup")), flush=True)
        return
    if shutil.which("valgrind") is None:
        print("bench_instructions: skipped (valgrind not found)")
        return
    common = ["--what", a.what, "--trace", str(trace), "--hours", str(a.hours), "--limit", str(a.limit),
              "--router", a.router]
    setup, _ = under_callgrind([*common, "--inner", "setup"])
    full, got = under_callgrind([*common, "--inner", "full"])
    replay = full - setup
    slice_ = f"first {a.hours:g} h of the day" if a.what == "day" else f"first {a.limit:,} requests" + (
        f", 8 replicas, {a.router}" if a.what == "fleet" else "")
    print(f"{a.what} ({slice_}): {got['requests']:,} requests, {got['steps']:,} steps; instructions: setup "
          f"{setup / 1e9:.3f} G, replay {replay / 1e9:.3f} G = {replay / max(got['requests'], 1):,.0f} a request, "
          f"{replay / max(got['steps'], 1):,.0f} a step")
    emit("bench_instructions", got["cost_model"],
         {"what": a.what, "slice": slice_, "requests": got["requests"], "steps": got["steps"],
          "setup_instructions": setup, "replay_instructions": replay,
          "per_request": round(replay / max(got["requests"], 1)), "per_step": round(replay / max(got["steps"], 1))},
         a.record)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
