"""Time Vidur's simulation loop on the configuration of ``bench_engine.py`` (issue 19's anchor).

Runs in a Python environment of its own that has Vidur installed (``pip install vidur``; it
pins its own numpy/pandas/scikit-learn and pulls wandb, streamlit, ...), never in kvsim's::

    python -m venv /tmp/vidur-venv && /tmp/vidur-venv/bin/pip install vidur
    /tmp/vidur-venv/bin/python bench/vidur_loop.py --trace CONV.csv --profiles DIR --work DIR

``bench_engine.py --vidur-python /tmp/vidur-venv/bin/python --vidur-work DIR`` runs it just
before kvsim's loop and records both, so the ratio is taken in one run; ``bench_fleet.py``
does the same with ``--replicas 8`` behind Vidur's round-robin global scheduler.

What it does, and what it changes in Vidur (checked against vidur 0.0.26 from PyPI):

- **Profiles.** That release downloads its operator profiles from Hugging Face datasets. They
  are read instead from ``--profiles``: the Vidur profile folder of the data folder
  (``gpu_profiles/vidur``: ``compute/a100/meta-llama/Llama-2-70b-hf/{mlp,attention}.csv`` and
  ``network/a100_pairwise_nvlink/all_reduce.csv``). Pipeline send/recv is not profiled there;
  the all-reduce rows stand in for it, and with one pipeline stage Vidur never uses them.
- **Preemption.** ``Request.restart`` (a preempted request recomputes) keeps the stage counters
  of the run before it, so the next prefill trips an assertion (``entities/request.py:300``);
  the counters are reset there, as the other counters are.
- **Trace.** The conv trace is rewritten in Vidur's trace-replay format (seconds since its
  first arrival; prompt and output tokens); Vidur clips each request to 4,096 tokens.
- **Timed:** ``Simulator.run``'s event loop, without writing metrics (plots and traces off).
  Predictor training (about 12 minutes on 2 cores, the first time) is cached in ``--work``.

Prints one line ``VIDUR {json}``: loop seconds, set-up seconds, batches (all replicas), their
mean size, one replica's KV blocks and the simulated end time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

MODEL_DIR = ("compute", "a100", "meta-llama", "Llama-2-70b-hf")
NETWORK = "a100_pairwise_nvlink"


def run_vidur(python: str, trace: Path, profiles: Path, work: Path, replicas: int = 1,
              router: str = "round_robin") -> dict[str, Any] | None:
    """Run this script under ``python`` (kvsim's side: standard library only); its ``VIDUR``
    record, or None after a one-line message on stderr when it failed."""
    cmd = [python, __file__, "--trace", str(trace), "--profiles", str(profiles), "--work", str(work),
           "--replicas", str(replicas), "--router", router]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        print(f"vidur_loop: --vidur-python {python}: {e.strerror}", file=sys.stderr)
        return None
    for line in out.stdout.splitlines():
        if line.startswith("VIDUR "):
            return json.loads(line[6:])  # type: ignore[no-any-return]
    tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
    print(f"vidur_loop: Vidur's loop failed (rc {out.returncode}): {tail}", file=sys.stderr)
    return None


def add_options(ap: argparse.ArgumentParser) -> None:
    """The benches' options that time Vidur's loop first (``bench_engine``, ``bench_fleet``)."""
    ap.add_argument("--vidur-python", default=None, help="a Python with vidur installed: time Vidur's loop first")
    ap.add_argument("--vidur-work", type=Path, default=None, help="folder for Vidur's trace copy and predictor cache")
    ap.add_argument("--vidur-profiles", type=Path, default=None, help="default: $KVSIM_DATA/gpu_profiles/vidur")


def from_options(a: argparse.Namespace, bench: str, trace: Path, replicas: int = 1) -> dict[str, Any] | None:
    """Vidur's loop on ``trace`` as :func:`add_options` asked (None: not asked, or it failed)."""
    if not a.vidur_python:
        return None
    if a.vidur_work is None:
        sys.exit(f"{bench}: --vidur-python needs --vidur-work DIR")
    profiles = a.vidur_profiles or Path(os.environ.get("KVSIM_DATA", ".")) / "gpu_profiles" / "vidur"
    return run_vidur(a.vidur_python, trace, profiles, a.vidur_work, replicas=replicas)


def vidur_args(trace: Path, work: Path, replicas: int = 1, router: str = "round_robin") -> list[str]:
    """Vidur's command line for the benches' configuration (Llama-2-70B, A100, TP 2, vLLM
    scheduler, 128 sequences, 16-token blocks, 90 % of GPU memory) on ``replicas`` replicas
    behind Vidur's ``router`` global scheduler."""
    return ["--replica_config_model_name", "meta-llama/Llama-2-70b-hf", "--replica_config_device", "a100",
            "--replica_config_network_device", NETWORK, "--replica_config_tensor_parallel_size", "2",
            "--replica_config_num_pipeline_stages", "1", "--replica_config_gpu_memory_utilization", "0.9",
            "--cluster_config_num_replicas", str(replicas), "--global_scheduler_config_type", router,
            "--request_generator_config_type", "trace_replay",
            "--trace_request_generator_config_trace_file", str(trace), "--trace_request_generator_config_date", "d",
            "--trace_request_generator_config_prefill_scale_factor", "1",
            "--trace_request_generator_config_time_scale_factor", "1",
            "--trace_request_generator_config_max_tokens", "4096",
            "--replica_scheduler_config_type", "vllm", "--vllm_scheduler_config_batch_size_cap", "128",
            "--cache_config_block_size", "16", "--execution_time_predictor_config_type", "random_forrest",
            "--random_forrest_execution_time_predictor_config_cache_dir", str(work / "cache"),
            "--random_forrest_execution_time_predictor_config_k_fold_cv_splits", "2",
            "--no-metrics_config_write_metrics", "--no-metrics_config_store_plots",
            "--metrics_config_output_dir", str(work / "out")]


def write_trace(conv: Path, out: Path) -> int:
    import pandas as pd

    df = pd.read_csv(conv)
    missing = [c for c in ("TIMESTAMP", "ContextTokens", "GeneratedTokens") if c not in df.columns]
    if missing:
        sys.exit(f"vidur_loop: {conv}: no column {missing[0]} (an Azure 2023 trace has TIMESTAMP, "
                 "ContextTokens, GeneratedTokens)")
    ts = pd.to_datetime(df["TIMESTAMP"], format="mixed")
    pd.DataFrame({"Date": "d", "Time": (ts - ts.iloc[0]).dt.total_seconds(), "PromptTokenCount": df["ContextTokens"],
                  "CompletionTokenCount": df["GeneratedTokens"]}).to_csv(out, index=False)
    return len(df)


def patch_vidur(profiles: Path, work: Path) -> dict[str, int]:
    """Local profiles, the restart fix, a batch counter (module docstring)."""
    import pandas as pd
    from vidur.entities import request as vreq
    from vidur.events import batch_end_event as vbatch
    from vidur.execution_time_predictor import sklearn_execution_time_predictor as vpred

    all_reduce = profiles / "network" / NETWORK / "all_reduce.csv"
    send_recv = work / "send_recv.csv"
    pd.read_csv(all_reduce).assign(collective="send_recv").to_csv(send_recv, index=False)
    model = profiles.joinpath(*MODEL_DIR)

    def input_files(self: Any) -> tuple[str, str, str, str]:
        return str(model / "mlp.csv"), str(model / "attention.csv"), str(all_reduce), str(send_recv)

    def no_download(self: Any) -> Any:
        raise RuntimeError("predictions are trained from the local profiles")

    vpred.SklearnExecutionTimePredictor._get_input_files = input_files
    vpred.SklearnExecutionTimePredictor._load_predictions_from_hf = no_download
    restart = vreq.Request.restart

    def restart_clean(self: Any) -> None:
        restart(self)
        self._num_stage_processed_tokens = 0
        self._is_prefill_stage_complete = False

    vreq.Request.restart = restart_clean
    counts = {"batches": 0, "batched": 0}
    end = vbatch.BatchEndEvent.handle_event

    def counted(self: Any, *a: Any) -> Any:
        counts["batches"] += 1
        counts["batched"] += self._batch.size
        return end(self, *a)

    vbatch.BatchEndEvent.handle_event = counted
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True, help="AzureLLMInferenceTrace_conv.csv")
    ap.add_argument("--profiles", type=Path, required=True, help="the data folder's gpu_profiles/vidur")
    ap.add_argument("--work", type=Path, required=True, help="folder for the rewritten trace and Vidur's cache")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--router", default="round_robin", choices=("round_robin", "lor", "random"),
                    help="Vidur's global scheduler (lor: least outstanding requests)")
    a = ap.parse_args()
    model = a.profiles.joinpath(*MODEL_DIR)
    for p in (a.trace, model / "mlp.csv", model / "attention.csv", a.profiles / "network" / NETWORK / "all_reduce.csv"):
        if not p.exists():
            sys.exit(f"vidur_loop: {p}: no such file")
    if a.replicas < 1:
        sys.exit(f"vidur_loop: --replicas {a.replicas}: needs at least 1")
    try:
        version("vidur")
    except PackageNotFoundError:
        sys.exit(f"vidur_loop: vidur is not installed for {sys.executable} (pip install vidur, in a venv of its own)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    a.work.mkdir(parents=True, exist_ok=True)
    n = write_trace(a.trace, a.work / "trace.csv")
    counts = patch_vidur(a.profiles, a.work)
    from vidur.config import SimulationConfig
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds

    sys.argv = ["vidur", *vidur_args(a.work / "trace.csv", a.work, a.replicas, a.router)]
    cfg = SimulationConfig.create_from_cli_args()
    set_seeds(cfg.seed)
    t0 = time.perf_counter()
    sim = Simulator(cfg)
    t1 = time.perf_counter()
    Simulator._write_output = lambda self: None  # the loop alone
    sim.run()
    t2 = time.perf_counter()
    blocks = [int(s._cache_config.num_blocks) for s in getattr(sim.scheduler, "_replica_schedulers", {}).values()]
    print("VIDUR " + json.dumps({
        "version": version("vidur"), "requests": n, "replicas": a.replicas, "router": a.router,
        "loop_s": round(t2 - t1, 3), "setup_s": round(t1 - t0, 1),
        "batches": counts["batches"], "mean_batch": round(counts["batched"] / max(counts["batches"], 1), 1),
        "kv_blocks": blocks[0] if blocks else None, "simulated_s": round(float(sim._time), 1)}), flush=True)


if __name__ == "__main__":
    main()
