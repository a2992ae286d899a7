"""Engine speed of the working tree as a ratio against a base commit, measured in one run.

Issue 9 asks that the core redesign be "no more than 5 % slower in bench/bench_engine.py,
measured as a ratio against the pre-change commit in one run". This script measures exactly
that: it checks ``--base`` out into a temporary ``git worktree`` (outside the repository,
removed at the end) and then, round by round, runs the same benchmark in a fresh interpreter
for the base tree and for the working tree (``PYTHONPATH`` pointing at each tree, the current
interpreter). The order alternates between rounds (base, head / head, base, ...) so a drift
in machine load does not favour one side.

One run = load the trace (not timed), then time ``simulate(make_config(**CONFIG), trace)``
-- wall (``perf_counter``) and CPU (``process_time``) of that call only -- for each mode
(fast-forward, and with ``--exact`` also ``exact_steps=True``). Each run also reports the
number of engine steps (rows of ``result.steps``) and of preemptions (sum of
``result.requests.num_preemptions``): the redesign must not change behaviour, so these must
be equal on both sides, and a loud MISMATCH is printed when they are not. Only the API
shared by both trees is used (``sim.config.schema.make_config``, ``sim.run.simulate.simulate``,
``workloads.load_trace``, the two frames), never the summary, whose type is changing.

This parent process imports nothing from either tree, so it runs even while the working
tree is mid-edit; a side that fails is reported with its error.

    KVSIM_DATA=DIR python bench/bench_compare.py [--base REV] [--rounds N] [--exact] [--trace PATH]
        [--cost-model SPEC] [--quick]

Exit status: 0 when every run completed (whatever the ratio, mismatches included: they are
printed), 1 when some run failed (import error, crash), 2 when the base could not be checked
out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BASE = "main"
TRACE_IN_DATA = ("traces", "azure_llm_2023", "AzureLLMInferenceTrace_conv.csv")  # under $KVSIM_DATA

# Copied from bench/bench_engine.py (issue 19's configuration) rather than imported: importing
# it would import sim from this tree, which must not be needed to run the comparison. The cost
# model is each tree's default unless --cost-model names one.
CONFIG: dict[str, object] = dict(model="llama-2-70b", gpu="a100-80gb", tensor_parallel_size=2,
                                 max_num_seqs=128, block_size=16, max_model_len=4096)
QUICK_REQUESTS = 3000
MARK = "BENCH_COMPARE_RESULT "

# Runs in a fresh interpreter with PYTHONPATH=<tree> and cwd=<tree>; argv[1] is a JSON job.
WORKER = r"""
import dataclasses, json, os, sys, time
job = json.loads(sys.argv[1])
import sim, workloads
from sim.config.schema import make_config
from sim.run.simulate import simulate
from workloads import load_trace
tree = os.path.realpath(job["tree"])
for mod in (sim, workloads):
    if not os.path.realpath(mod.__file__).startswith(tree + os.sep):
        raise SystemExit(f"{mod.__name__} imported from {mod.__file__}, not from {tree}")
trace = load_trace(job["trace"])
if job["limit"]:
    trace = dataclasses.replace(trace, df=trace.df.iloc[: job["limit"]].reset_index(drop=True))
out = {"requests": len(trace.df), "modes": {}}
for mode in job["modes"]:
    cfg = make_config(exact_steps=(mode == "exact"), **job["config"])
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(cfg, trace)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out["modes"][mode] = {"wall_s": wall, "cpu_s": cpu, "steps": len(res.steps),
                          "preemptions": int(res.requests["num_preemptions"].sum())}
print(job["mark"] + json.dumps(out), flush=True)
"""


def run_worker(tree: Path, worker: str, job: dict, mark: str) -> dict:
    """Run ``worker`` (Python source; argv[1] is ``job`` as JSON, ``job["mark"]`` is ``mark``)
    in a fresh interpreter with ``tree`` first on the path; the JSON it prints after ``mark``,
    or ``{"error": ...}`` if it failed. Also used by ``bench_pd.py``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    p = subprocess.run([sys.executable, "-c", worker, json.dumps({**job, "mark": mark})], cwd=tree, env=env,
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith(mark):
            return json.loads(line[len(mark):])
    tail = (p.stderr or p.stdout).strip().splitlines()[-8:]
    return {"error": f"exit {p.returncode}: " + "\n    ".join(tail)}


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """``rev`` checked out into a temporary ``git worktree`` (removed on exit), its optional C
    extensions built in place (:func:`build_extensions`); exits with status 2 when it cannot be
    checked out. Also used by ``bench_pd.py``."""
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-base-") as tmp:
        base = Path(tmp) / "base"
        add = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), rev],
                             capture_output=True, text=True)
        if add.returncode != 0:
            print(f"git worktree add {rev} failed:\n{add.stderr}", file=sys.stderr)
            raise SystemExit(2)
        try:
            print(f"base {rev}: {build_extensions(base)} compiled extensions; working tree: "
                  f"{len(extensions(REPO))}", flush=True)
            yield base
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
                           capture_output=True, text=True)


def extensions(tree: Path) -> list[Path]:
    """The compiled extension modules built in ``tree``."""
    return sorted(p for ext in ("so", "pyd") for p in (tree / "sim").rglob(f"*.{ext}"))


def build_extensions(tree: Path) -> int:
    """Build ``tree``'s optional C extensions in place, as ``pip install`` does, so that a base is
    timed as its users ran it, like the working tree (a fresh worktree has none: without this its
    hot loops would run as Python). Returns how many it has; a failed build leaves it pure Python."""
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "build_ext", "--inplace", "-q"],
                   cwd=tree, capture_output=True, text=True)
    return len(extensions(tree))


def run_side(tree: Path, trace: Path, limit: int, modes: list[str], config: dict) -> dict:
    """One benchmark run of ``tree`` in a fresh interpreter; ``{"error": ...}`` if it failed."""
    job = {"tree": str(tree), "trace": str(trace), "limit": limit, "modes": modes, "config": config}
    return run_worker(tree, WORKER, job, MARK)


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):8.3f} {min(xs):8.3f}" if xs else f"{'-':>8s} {'-':>8s}"


def report(results: dict[str, list[dict]], modes: list[str]) -> bool:
    """Print the table; return True when steps/preemptions differ between the sides."""
    mismatch = False
    print()
    print(f"{'mode':12s} {'metric':7s} | {'base med':>8s} {'base min':>8s} | {'head med':>8s} {'head min':>8s} | "
          f"{'med/med':>7s} {'min/min':>7s} {'med(r)':>7s}")
    print("-" * 98)
    for mode in modes:
        ok = [(b["modes"][mode], h["modes"][mode]) for b, h in zip(results["base"], results["head"], strict=True)
              if "error" not in b and "error" not in h]
        for metric in ("wall_s", "cpu_s"):
            bs = [r["modes"][mode][metric] for r in results["base"] if "error" not in r]
            hs = [r["modes"][mode][metric] for r in results["head"] if "error" not in r]
            if bs and hs:
                rr = statistics.median(h[metric] / b[metric] for b, h in ok) if ok else float("nan")
                ratios = (f"{statistics.median(hs) / statistics.median(bs):7.3f} {min(hs) / min(bs):7.3f} "
                          f"{rr:7.3f}")
            else:
                ratios = f"{'-':>7s} {'-':>7s} {'-':>7s}"
            print(f"{mode:12s} {metric:7s} | {_fmt(bs)} | {_fmt(hs)} | {ratios}")
        for side in ("base", "head"):
            seen = {(r["modes"][mode]["steps"], r["modes"][mode]["preemptions"])
                    for r in results[side] if "error" not in r}
            for steps, pre in sorted(seen):
                print(f"{'':12s} {side}: steps {steps:,}, preemptions {pre:,}")
        sides = [{(r["modes"][mode]["steps"], r["modes"][mode]["preemptions"])
                  for r in results[s] if "error" not in r} for s in ("base", "head")]
        if sides[0] and sides[1] and (sides[0] != sides[1] or len(sides[0]) > 1):
            mismatch = True
            print(f"!!! MISMATCH ({mode}): steps/preemptions differ: base {sorted(sides[0])} "
                  f"head {sorted(sides[1])} -- behaviour changed !!!")
    print("ratios are head/base (< 1 = head faster); med(r) = median of the per-round ratios")
    return mismatch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=DEFAULT_BASE, help="commit to compare against (default: main)")
    ap.add_argument("--cost-model", default=None, help="pin a cost model (default: each tree's default)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--exact", action="store_true", help="also time exact_steps=True")
    ap.add_argument("--trace", type=Path, default=None, help="default: $KVSIM_DATA/" + "/".join(TRACE_IN_DATA))
    ap.add_argument("--quick", action="store_true", help=f"first {QUICK_REQUESTS} requests only (smoke run)")
    a = ap.parse_args()
    if a.trace is None and not os.environ.get("KVSIM_DATA"):
        print("skipped: set KVSIM_DATA to the data folder (traces/azure_llm_2023/...) or pass --trace")
        return 0
    trace = (a.trace or Path(os.environ["KVSIM_DATA"]).joinpath(*TRACE_IN_DATA)).resolve()
    config = {**CONFIG, **({"cost_model": a.cost_model} if a.cost_model else {})}
    if not trace.exists():
        print(f"trace not found: {trace}", file=sys.stderr)
        return 2
    modes = ["fast-forward"] + (["exact"] if a.exact else [])
    limit = QUICK_REQUESTS if a.quick else 0
    head = REPO
    with worktree(a.base) as base:
        rev = subprocess.run(["git", "-C", str(base), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                               capture_output=True, text=True).stdout.strip()
        print(f"base {rev} ({base}) vs head {head}{' (uncommitted changes)' if dirty else ''}")
        print(f"trace {trace}{f' (first {limit} requests)' if limit else ''}; modes {', '.join(modes)}; "
              f"{a.rounds} rounds; {sys.executable}")
        results: dict[str, list[dict]] = {"base": [], "head": []}
        for i in range(a.rounds):
            order = [("base", base), ("head", head)]
            if i % 2:
                order.reverse()
            for side, tree in order:
                r = run_side(tree, trace, limit, modes, config)
                results[side].append(r)
                if "error" in r:
                    print(f"round {i + 1} {side}: FAILED {r['error']}")
                else:
                    msg = "  ".join(f"{m} wall {v['wall_s']:.3f} s cpu {v['cpu_s']:.3f} s "
                                    f"steps {v['steps']:,} preempt {v['preemptions']:,}"
                                    for m, v in r["modes"].items())
                    print(f"round {i + 1} {side}: {msg}")
    report(results, modes)
    failed = [s for s in results for r in results[s] if "error" in r]
    if failed:
        print(f"{len(failed)} run(s) failed ({', '.join(sorted(set(failed)))}); see above")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
