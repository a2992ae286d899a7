"""GPU timing harness: one command, resumable, budgeted. torch + triton + numpy + stdlib only.

    python -m calibration.run_gpu                      # on a CUDA GPU -> calibration/data/<gpu>/
    python -m calibration.run_gpu --budget-s 420       # stop after 7 minutes; rerun to resume
    calibration/device_run.sh                          # this harness + the layer suite, 8 minutes
    python -m calibration.run_gpu --allow-cpu --out D  # tests: tiny grid, wall clock, labelled cpu

Times (CUDA events, warm-up, L2 flushed before each rep, median/p10/p90): the unified paged
attention kernel over decode/prefill/mixed batches x block sizes x GQA shapes, the PAGED=False
variant on the same points, the KV write kernel, torch.matmul for every catalog model's dense
shapes, and D2D / H2D / D2H copy bandwidth. Writes one CSV per suite plus ``meta.json``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from calibration.manifest import Point, manifest

REPO = Path(__file__).resolve().parents[1]
FIELDS = {
    "attention": ["point_id", "kind", "variant", "dtype", "q_heads", "kv_heads", "head_dim",
                  "block_size", "paged", "page_order", "n_seqs", "n_prefill", "n_decode", "sum_q",
                  "sum_ctx", "sum_pairs", "max_ctx", "pages_touched"],
    "gemm": ["point_id", "op", "n", "k", "m", "dtype"],
    "kv_write": ["point_id", "n", "kv_heads", "head_dim", "block_size", "dtype"],
    "copy": ["point_id", "kind", "bytes", "gbps"],
}
TIMING = ["t_us_median", "t_us_p10", "t_us_p90", "reps"]
MAX_FAILURES = 5  # a broken CUDA context fails every later point: stop rather than spin


def gpu_key(name: str, mem_gb: float) -> str:
    n = name.upper()
    for tag, key in (("H200", "h200"), ("H100", "h100"), ("B200", "b200"), ("L40S", "l40s"),
                     ("MI300X", "mi300x"), ("L4", "l4")):
        if tag in n:
            return key
    if "A100" in n:
        return "a100-80gb" if mem_gb > 50 else "a100-40gb"
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def metadata(torch: Any, cpu: bool) -> dict[str, Any]:
    import triton

    commit = _run(["git", "rev-parse", "HEAD"])
    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        # A copied tree without .git (a lent GPU machine): the caller names the commit.
        "git_commit": commit or os.environ.get("KVSIM_GIT_COMMIT", "unknown"),
        "git_dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"]))
        if commit else "unknown (no .git)",
        "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "host": platform.node(),
    }
    if cpu:
        meta.update(device_name="cpu (TRITON_INTERPRET=1)", gpu="cpu", driver="n/a",
                    timing="wall clock on CPU under the Triton interpreter: NOT GPU DATA")
        return meta
    p = torch.cuda.get_device_properties(0)
    smi = _run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
                "clocks.max.mem,power.limit,pstate", "--format=csv,noheader"])
    meta.update(device_name=torch.cuda.get_device_name(0), gpu=gpu_key(p.name, p.total_memory / 1e9),
                memory_gb=round(p.total_memory / 1e9, 1), sms=p.multi_processor_count,
                cuda=torch.version.cuda, driver=smi.split(",")[0].strip() if smi else "unknown",
                nvidia_smi=("driver, clocks.sm, clocks.mem, clocks.max.sm, clocks.max.mem, "
                            f"power.limit, pstate: {smi}") if smi else "unavailable",
                timing="CUDA events, median of reps, L2 flushed")
    return meta


class Timer:
    """CUDA-event timing (GPU) or wall clock (CPU, tests only). Returns microseconds."""

    def __init__(self, torch: Any, cpu: bool, warmup: int, reps: int) -> None:
        self.torch, self.cpu, self.warmup, self.reps = torch, cpu, warmup, reps
        self.flush = None if cpu else torch.empty(256 << 20, dtype=torch.int8, device="cuda")

    def __call__(self, fn: Callable[[], object]) -> dict[str, float]:
        for _ in range(self.warmup):
            fn()
        ts: list[float] = []
        for _ in range(self.reps):
            if self.cpu:
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e6)
                continue
            assert self.flush is not None
            self.flush.zero_()
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            ts.append(start.elapsed_time(end) * 1e3)
        ts.sort()
        # inclusive: stays within the samples (the default extrapolates, e.g. below 0 with 2 reps)
        q = statistics.quantiles(ts, n=10, method="inclusive") if len(ts) > 1 else [ts[0]] * 9
        return {"t_us_median": statistics.median(ts), "t_us_p10": q[0], "t_us_p90": q[-1],
                "reps": len(ts)}


def measure(p: Point, torch: Any, timer: Timer, dev: str, dtype: Any) -> dict[str, Any]:
    """Build inputs outside the timed region, then time. Returns the CSV row."""
    if p["suite"] == "attention":
        from calibration.suites import attention_row
        return attention_row(p, torch, timer, dev, dtype)
    if p["suite"] == "gemm":
        a = torch.randn((p["n"], p["k"]), device=dev).to(dtype)
        w = torch.randn((p["k"], p["m"]), device=dev).to(dtype)
        return {**p, "dtype": str(dtype).split(".")[-1], **timer(lambda: torch.matmul(a, w))}
    if p["suite"] == "kv_write":
        from calibration.suites import kv_write_row
        return kv_write_row(p, torch, timer, dev, dtype)
    from calibration.suites import copy_row
    return copy_row(p, torch, timer, dev)


def done_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    with path.open() as f:
        return {r["point_id"] for r in csv.DictReader(f)}


def append_row(path: Path, fields: list[str], row: dict[str, Any]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)


def summary(out: Path) -> str:
    lines = ["suite       points  median t_us (min..max)"]
    for suite in FIELDS:
        path = out / f"{suite}.csv"
        if not path.exists():
            continue
        with path.open() as f:
            ts = [float(r["t_us_median"]) for r in csv.DictReader(f)]
        if ts:
            lines.append(f"{suite:<11} {len(ts):>6}  {statistics.median(ts):10.1f} "
                         f"({min(ts):.1f}..{max(ts):.1f})")
    return "\n".join(lines)


def cpu_refusal(cpu: bool, allow_cpu: bool, out: Path | None) -> str | None:
    """Why a run may not start (None: it may). CPU runs are tests: never GPU data, never in
    calibration/data, and Triton must be in interpreter mode before its first import."""
    if not cpu:
        return None
    if not allow_cpu:
        return "refusing to run: no CUDA GPU (pass --allow-cpu for a tiny test run; never GPU data)"
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        return "set TRITON_INTERPRET=1 before importing triton for a CPU run"
    os.environ["TRITON_INTERPRET"] = "1"
    if out is None or (REPO / "calibration" / "data") in out.resolve().parents:
        return "--allow-cpu needs --out outside calibration/data"
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m calibration.run_gpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="output dir (default calibration/data/<gpu>)")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="stop starting new points this many seconds after the start")
    ap.add_argument("--allow-cpu", action="store_true", help="tests only: tiny grid, wall clock, labelled cpu")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--suites", default="copy,kv_write,attention,gemm")
    ap.add_argument("--reps", type=int, default=0, help="timed reps per point (default 20 GPU, 2 CPU)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    t0 = time.monotonic()  # the budget counts imports and the correctness check too
    args = parse_args(argv)
    import torch

    cpu = not torch.cuda.is_available()
    refused = cpu_refusal(cpu, args.allow_cpu, args.out)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    meta = metadata(torch, cpu)
    out = args.out or REPO / "calibration" / "data" / meta["gpu"]
    if (out / "meta.json").exists():  # resuming: same GPU only; keep the layer suite's entries
        there = json.loads((out / "meta.json").read_text())
        if there.get("gpu") != meta["gpu"]:
            print(f"{out / 'meta.json'} is a {there.get('gpu')} run; this is {meta['gpu']}: "
                  "use another --out", file=sys.stderr)
            return 2
        meta = {**there, **meta}
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    if cpu:
        dtype = torch.float16  # the interpreter's bf16 dot is wrong (triton#11584)
    timer = Timer(torch, cpu, warmup=0 if cpu else 5, reps=args.reps or (2 if cpu else 20))
    dev = "cpu" if cpu else "cuda"
    if not cpu:
        from calibration.suites import correctness_check
        meta["correctness"] = correctness_check(torch, dtype)
        (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    suites = set(args.suites.split(","))
    n_new, n_skip, spent = 0, 0, False
    failed: list[str] = []
    done = {s: done_ids(out / f"{s}.csv") for s in FIELDS}
    todo = [p for p in manifest(cpu) if p["suite"] in suites]
    for p in todo:
        if p["point_id"] in done[p["suite"]]:
            n_skip += 1
            continue
        if time.monotonic() - t0 > args.budget_s:
            spent = True
            print(f"budget of {args.budget_s:.0f}s spent: rerun the same command to resume")
            break
        try:
            row = measure(p, torch, timer, dev, dtype)
        except Exception as e:  # one bad point (OOM, a config that will not compile) is a note
            failed.append(f"{p['point_id']}: {type(e).__name__}: {e}"[:300])
            print(f"point failed: {failed[-1]}", file=sys.stderr)
            if len(failed) >= MAX_FAILURES:
                break
            continue
        append_row(out / f"{p['suite']}.csv", FIELDS[p["suite"]] + TIMING, row)
        done[p["suite"]].add(p["point_id"])
        n_new += 1
    meta["harness"] = {"points": len(todo), "measured_now": n_new, "already_present": n_skip,
                       "not_run": sum(p["point_id"] not in done[p["suite"]] for p in todo),
                       "budget_s": args.budget_s, "budget_spent": spent, "failed": failed,
                       "wall_s": round(time.monotonic() - t0, 1)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{n_new} points measured, {n_skip} already present, {time.monotonic() - t0:.0f}s; "
          f"data in {out}" + (" (CPU wall clock: NOT GPU DATA)" if cpu else ""))
    print(summary(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
