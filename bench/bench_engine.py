"""Engine speed on the Azure 2023 conv trace, in the configuration of issue 19 (Vidur's anchor run).

One replica of Llama-2-70B on 2x A100-80GB (TP 2), vLLM scheduler, max_num_seqs 128, block
size 16, max_model_len 4096, replaying the conv trace (19,366 requests, one hour) with the
DEFAULT configuration -- cost model and serving stack included (``--cost-model`` pins one, e.g.
``calibrated`` or ``roofline``). The trace is found under ``$KVSIM_DATA``
(``traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv``) or given with ``--trace``; without
either the benchmark is skipped.

The loop time is the wall time of ``simulate(cfg, trace)`` (trace loading excluded), the
figure to set beside Vidur's loop on the same trace and machine. The set-up it would pay first in
a fresh process (the model catalogue, the KV budget, the cost model with its kernel tables:
``static_parts``, cached per process) is timed on its own before it and printed as ``setup``, as
Vidur's set-up is kept apart from its loop. Vidur's profiles are not on
PyPI, so Vidur is timed outside this repository; ``--vidur-s SECONDS`` prints the ratio to a
figure measured in the same session. Fast-forward (the default) and ``--exact-steps`` run in
this one process, so their ratio is measured under the same load.

    KVSIM_DATA=DIR python bench/bench_engine.py [--trace PATH] [--cost-model SPEC] [--skip-exact]
        [--limit N] [--vidur-s SECONDS] [--vidur-python PY --vidur-work DIR]

``--vidur-python`` runs Vidur's loop on the same trace first, in its own environment
(``bench/vidur_loop.py``, which says what it patches), and records both loops: the ratio of
one run. With ``--rounds N`` Vidur and kvsim's fast-forward loop then run in turn N times
(Vidur, kvsim, Vidur, kvsim, ...), each pair's ratio is recorded and the median is the figure:
on these shared VMs one pair's ratio moved between 11.6x and 18.9x within an hour.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import vidur_loop
from record import emit

from sim.config.schema import make_config
from sim.engine.replica import Replica
from sim.run.simulate import simulate
from sim.run.static import static_parts
from workloads import load_trace

TRACE_IN_DATA = ("traces", "azure_llm_2023", "AzureLLMInferenceTrace_conv.csv")
CONFIG: dict[str, Any] = dict(model="llama-2-70b", gpu="a100-80gb", tensor_parallel_size=2, max_num_seqs=128,
                              block_size=16, max_model_len=4096)


def config(exact: bool, cost_model: str | None) -> Any:
    return make_config(exact_steps=exact, **CONFIG, **({"cost_model": cost_model} if cost_model else {}))


def run(trace: Any, exact: bool, cost_model: str | None) -> dict[str, Any]:
    cfg = config(exact, cost_model)
    seen: list[Replica] = []
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(cfg, trace, on_step=lambda rep: seen.append(rep) if not seen else None)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = res.summary
    return {"wall_s": wall, "cpu_s": cpu, "requests": s.num_requests, "finished": s.num_finished,
            "steps": s.num_steps, "ff_steps": s.fast_forward_steps,
            "quiet_steps": seen[0].kernel.bulk_steps if seen else 0, "preemptions": s.preemptions,
            "kv_usage": s.kv_usage_mean, "cost": res.cost_model,
            "req_per_s": s.num_requests / wall, "steps_per_s": s.num_steps / wall}


def vidur_figures(vidur: dict[str, Any] | None, vidur_s: float | None,
                  rounds: list[tuple[float, float]]) -> dict[str, Any]:
    """The record's Vidur fields: Vidur's run in this process (its loop_s is the first round's
    figure), else a time measured in the same session; with more than one round (Vidur s,
    kvsim s) taken in turn, each pair and the median ratio."""
    out: dict[str, Any] = {}
    if vidur is not None:
        out["vidur"] = vidur
    elif vidur_s:
        out["vidur_s_same_session"] = vidur_s
    if len(rounds) > 1:
        out["vidur_rounds"] = [{"vidur_s": round(v, 3), "kvsim_s": round(k, 3), "ratio": round(v / k, 2)}
                               for v, k in rounds]
        out["vidur_ratio_median"] = round(statistics.median(v / k for v, k in rounds), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None, help="default: $KVSIM_DATA/" + "/".join(TRACE_IN_DATA))
    ap.add_argument("--cost-model", default=None, help="pin a cost model (default: the default one)")
    ap.add_argument("--skip-exact", action="store_true")
    ap.add_argument("--limit", type=int, default=0, help="first N requests only (smoke run)")
    ap.add_argument("--vidur-s", type=float, default=None, help="Vidur's loop time on this trace, same session")
    vidur_loop.add_options(ap)
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --vidur-python: Vidur and kvsim in turn this many times; the median ratio is the figure")
    ap.add_argument("--record", type=Path, default=None, help="append the run's JSON record to this file")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1, not {a.rounds}")
    if a.limit and a.vidur_python:
        ap.error("--limit with --vidur-python would time part of the trace against Vidur on all of it")
    path = a.trace
    if path is None:
        if not os.environ.get("KVSIM_DATA"):
            print("bench_engine: skipped (set KVSIM_DATA to the data folder, or pass --trace)")
            return
        path = Path(os.environ["KVSIM_DATA"]).joinpath(*TRACE_IN_DATA)
    if not path.exists():
        print(f"bench_engine: skipped ({path} not found)")
        return
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
          f"({os.cpu_count()} CPUs, Python {platform.python_version()})")
    t0 = time.perf_counter()
    trace = load_trace(path)
    if a.limit:
        trace = dataclasses.replace(trace, df=trace.df.iloc[: a.limit].reset_index(drop=True))
    print(f"load: {time.perf_counter() - t0:.2f} s, {len(trace.df):,} requests")
    vidur = vidur_loop.from_options(a, "bench_engine", path)
    if vidur is not None:
        print(f"Vidur {vidur['version']}: loop {vidur['loop_s']:.2f} s, {vidur['batches']:,} batches "
              f"(mean {vidur['mean_batch']}), {vidur['kv_blocks']} KV blocks, simulated to {vidur['simulated_s']:,} s")
        a.vidur_s = vidur["loop_s"]
    t1 = time.perf_counter()
    static_parts(config(False, a.cost_model))
    setup_s = time.perf_counter() - t1
    print(f"setup: {setup_s:.3f} s (catalogue, KV budget, cost model; once a process)")
    rows = [("fast-forward (default)", run(trace, False, a.cost_model))]
    rounds = [(vidur["loop_s"], rows[0][1]["wall_s"])] if vidur is not None else []
    while vidur is not None and len(rounds) < a.rounds:  # in turn: Vidur, then kvsim
        again = vidur_loop.from_options(a, "bench_engine", path)
        if again is None:
            break
        rounds.append((again["loop_s"], run(trace, False, a.cost_model)["wall_s"]))
        print(f"round {len(rounds)}: Vidur {rounds[-1][0]:.2f} s, kvsim {rounds[-1][1]:.2f} s: "
              f"{rounds[-1][0] / rounds[-1][1]:.1f}x")
    if not a.skip_exact:
        rows.append(("--exact-steps", run(trace, True, a.cost_model)))
    print(f"cost model: {rows[0][1]['cost']}")
    for name, r in rows:
        print(f"{name:24s} loop {r['wall_s']:6.2f} s (cpu {r['cpu_s']:5.2f} s) | {r['req_per_s']:7.0f} req/s | "
              f"{r['steps_per_s']:7.0f} steps/s | steps {r['steps']:,} (fast-forwarded {r['ff_steps']:,}, "
              f"quiet {r['quiet_steps']:,}) | finished {r['finished']:,} | preemptions {r['preemptions']:,} | "
              f"KV use {100 * r['kv_usage']:.1f}%")
    ff = rows[0][1]
    if a.vidur_s:
        how = "same run" if vidur is not None else "same session"
        print(f"vs Vidur's loop {a.vidur_s:.1f} s ({how}): {a.vidur_s / ff['wall_s']:.1f}x")
    if len(rows) > 1:
        print(f"fast-forward speed-up over --exact-steps (same process): {rows[1][1]['wall_s'] / ff['wall_s']:.1f}x")
    figures: dict[str, Any] = {"trace": path.name, "config": CONFIG, **{k: ff[k] for k in (
        "requests", "finished", "steps", "ff_steps", "quiet_steps", "preemptions")},
        "setup_s": round(setup_s, 3), "loop_s": round(ff["wall_s"], 3), "cpu_s": round(ff["cpu_s"], 3), "req_per_s": round(ff["req_per_s"]),
        "steps_per_s": round(ff["steps_per_s"])}
    if len(rows) > 1:
        figures["exact_loop_s"] = round(rows[1][1]["wall_s"], 3)
    figures |= vidur_figures(vidur, a.vidur_s, rounds)
    if len(rounds) > 1:
        print(f"Vidur / kvsim in {len(rounds)} rounds taken in turn: "
              + ", ".join(f"{r['ratio']:.1f}x" for r in figures["vidur_rounds"])
              + f"; median {figures['vidur_ratio_median']:.1f}x")
    emit("bench_engine", ff["cost"], figures, a.record)


if __name__ == "__main__":
    main()
