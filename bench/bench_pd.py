"""P/D cluster speed: the working tree's fast-forward against a base commit's exact steps, in one run.

Issue 50 asks that a P/D cluster on the bundled Mooncake slice run at least 3x faster than
``--exact-steps`` did before P/D instances fast-forwarded (base ``f327e0c``: prefill and
decode instances always stepped exactly). Through ``bench_compare.py``'s helpers, the base is checked out
into a temporary ``git worktree`` with its C extensions built (as the working tree's are), and each
round runs both trees in fresh interpreters, alternating the order; the ratio is given of the
medians and per round (a round's two runs are back to back: the machine's drift cancels more). Each run times ``run_cluster`` only (trace loading and imports are
not timed) and hashes every column of the requests and steps frames: in every column both trees
write, every mode of both trees must give the same bytes, else a loud MISMATCH. The base runs
with the working tree's step-cost profiles (``calibration/data/stacks.yaml``), so a refit of
them does not count as a difference between the engines.

Cluster: 2 prefill + 2 decode instances of Llama-3.1-8B on H100, ``max_num_batched_tokens``
2048, decode-first (and ``--flow prefill-first``), no API server (the base's P/D runs fail
with one: a bug fixed with the fast-forward), the 1,000 requests of the bundled slice.

    python bench/bench_pd.py [--base REV] [--rounds N] [--flow decode-first|prefill-first]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

from bench_compare import run_worker, worktree

REPO = Path(__file__).resolve().parents[1]
BASE = "f327e0c"  # the last commit whose P/D instances stepped exactly
STACKS = Path("calibration") / "data" / "stacks.yaml"
MARK = "BENCH_PD_RESULT "
WORKER = r"""
import hashlib, json, sys, time
job = json.loads(sys.argv[1])
from sim.cluster.disagg import run_cluster
from sim.cluster.spec import parse_cluster
from workloads import load_trace
trace = load_trace(job["trace"])
out = {}
for mode in job["modes"]:
    spec = {"flow": job["flow"], "defaults": {"model": "llama-3.1-8b", "gpu": "h100", "max_num_batched_tokens": 2048,
            "api_server_count": 0, "exact_steps": mode == "exact"},
            "instances": [{"name": "p", "role": "prefill", "count": 2}, {"name": "d", "role": "decode", "count": 2}]}
    t0, c0 = time.perf_counter(), time.process_time()
    res = run_cluster(parse_cluster(spec), trace)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    h = {f"{t}.{c}": hashlib.sha256(f[c].to_csv().encode()).hexdigest()[:16]
         for t, f in (("requests", res.requests), ("steps", res.steps)) for c in f.columns}
    out[mode] = {"wall_s": wall, "cpu_s": cpu, "steps": len(res.steps), "hash": h}
print(job["mark"] + json.dumps(out), flush=True)
"""


def run_side(tree: Path, modes: list[str], flow: str) -> dict:
    job = {"trace": str(REPO / "workloads" / "data" / "mooncake_conv_slice.jsonl"), "modes": modes, "flow": flow}
    return run_worker(tree, WORKER, job, MARK)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flow", default="decode-first", choices=("decode-first", "prefill-first"))
    a = ap.parse_args()
    sides = {"base": ["exact"], "head": ["fast-forward", "exact"]}
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    with worktree(a.base) as base:
        # the same step-cost profiles on both sides: a refit of them (calibration/data/stacks.yaml)
        # moves every step time, and the comparison is of the engines, not of the fits
        shutil.copyfile(REPO / STACKS, base / STACKS)
        for i in range(a.rounds):
            order = [("base", base), ("head", REPO)][:: -1 if i % 2 else 1]
            for side, tree in order:
                r = run_side(tree, sides[side], a.flow)
                runs[side].append(r)
                print(f"round {i + 1} {side}: " + (str(r["error"]) if "error" in r else "  ".join(
                    f"{m} {v['wall_s']:.2f} s, {v['steps']:,} steps" for m, v in r.items())))
    if any("error" in r for rs in runs.values() for r in rs):
        return 1
    med = {(s, m): statistics.median(r[m]["wall_s"] for r in runs[s]) for s in sides for m in sides[s]}
    cols = [r[m]["hash"] for s in sides for r in runs[s] for m in sides[s]]  # column -> hash, per run
    shared = set.intersection(*(set(c) for c in cols))
    new = sorted(set.union(*(set(c) for c in cols)) - shared)  # a column one tree writes and the other not
    differ = sorted(k for k in shared if len({c[k] for c in cols}) > 1)
    print(f"\n{a.flow}, {a.rounds} rounds, median wall s: base exact {med['base', 'exact']:.2f}, "
          f"head exact {med['head', 'exact']:.2f}, head fast-forward {med['head', 'fast-forward']:.2f}")
    paired = sorted(b["exact"]["wall_s"] / h["fast-forward"]["wall_s"] for b, h in zip(runs["base"], runs["head"], strict=True))
    cpu = {(s, m): statistics.median(r[m]["cpu_s"] for r in runs[s]) for s in sides for m in sides[s]}
    print(f"speed-up vs the base's exact steps: {med['base', 'exact'] / med['head', 'fast-forward']:.2f}x "
          f"(target >= 3; per round {paired[0]:.2f}x to {paired[-1]:.2f}x, median {statistics.median(paired):.2f}x); "
          f"vs the head's own exact steps: {med['head', 'exact'] / med['head', 'fast-forward']:.2f}x")
    print(f"CPU time (process_time; a VM's stolen time not counted): base exact {cpu['base', 'exact']:.2f} s, "
          f"head fast-forward {cpu['head', 'fast-forward']:.2f} s, {cpu['base', 'exact'] / cpu['head', 'fast-forward']:.2f}x")
    print(f"outputs: {len(shared)} shared columns identical in every mode" if not differ else f"MISMATCH in {differ}")
    if new:
        print(f"columns not in every run (not compared): {new}")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
