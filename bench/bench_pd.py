"""P/D cluster speed: the working tree's fast-forward against a base commit's exact steps, in one run.

Issue 50 asks that a P/D cluster on the bundled Mooncake slice run at least 3x faster than
``--exact-steps`` did before P/D instances fast-forwarded (base ``f327e0c``: prefill and
decode instances always stepped exactly). Like ``bench_compare.py``, the base is checked out
into a temporary ``git worktree``, and each round runs both trees in fresh interpreters,
alternating the order. Each run times ``run_cluster`` only (trace loading and imports are
not timed) and hashes the requests and steps frames: every mode of both trees must give the
same bytes, else a loud MISMATCH.

Cluster: 2 prefill + 2 decode instances of Llama-3.1-8B on H100, ``max_num_batched_tokens``
2048, decode-first (and ``--flow prefill-first``), no API server (the base's P/D runs fail
with one: a bug fixed with the fast-forward), the 1,000 requests of the bundled slice.

    python bench/bench_pd.py [--base REV] [--rounds N] [--flow decode-first|prefill-first]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = "f327e0c"  # the last commit whose P/D instances stepped exactly
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
    t0 = time.perf_counter()
    res = run_cluster(parse_cluster(spec), trace)
    wall = time.perf_counter() - t0
    h = hashlib.sha256(res.requests.to_csv().encode() + res.steps.to_csv().encode()).hexdigest()[:16]
    out[mode] = {"wall_s": wall, "steps": len(res.steps), "hash": h}
print(job["mark"] + json.dumps(out), flush=True)
"""


def run_side(tree: Path, modes: list[str], flow: str) -> dict:
    job = {"trace": str(REPO / "workloads" / "data" / "mooncake_conv_slice.jsonl"), "modes": modes, "flow": flow,
           "mark": MARK}
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    p = subprocess.run([sys.executable, "-c", WORKER, json.dumps(job)], cwd=tree, env=env,
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    return {"error": (p.stderr or p.stdout).strip().splitlines()[-3:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flow", default="decode-first", choices=("decode-first", "prefill-first"))
    a = ap.parse_args()
    sides = {"base": ["exact"], "head": ["fast-forward", "exact"]}
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-pd-") as tmp:
        base = Path(tmp) / "base"
        add = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), a.base],
                             capture_output=True, text=True)
        if add.returncode:
            print(f"git worktree add {a.base} failed:\n{add.stderr}", file=sys.stderr)
            return 2
        try:
            for i in range(a.rounds):
                order = [("base", base), ("head", REPO)][:: -1 if i % 2 else 1]
                for side, tree in order:
                    r = run_side(tree, sides[side], a.flow)
                    runs[side].append(r)
                    print(f"round {i + 1} {side}: {r}")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], capture_output=True)
    if any("error" in r for rs in runs.values() for r in rs):
        return 1
    med = {(s, m): statistics.median(r[m]["wall_s"] for r in runs[s]) for s in sides for m in sides[s]}
    hashes = {r[m]["hash"] for s in sides for r in runs[s] for m in sides[s]}
    print(f"\n{a.flow}, {a.rounds} rounds, median wall s: base exact {med['base', 'exact']:.2f}, "
          f"head exact {med['head', 'exact']:.2f}, head fast-forward {med['head', 'fast-forward']:.2f}")
    print(f"speed-up vs the base's exact steps: {med['base', 'exact'] / med['head', 'fast-forward']:.2f}x "
          f"(target >= 3); vs the head's own exact steps: {med['head', 'exact'] / med['head', 'fast-forward']:.2f}x")
    print("outputs: identical in every mode" if len(hashes) == 1 else f"MISMATCH: {sorted(hashes)}")
    return 0 if len(hashes) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
