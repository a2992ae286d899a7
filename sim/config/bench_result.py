"""A simulated run as ``vllm bench serve --save-result`` writes a real one (``simulate --save-result``).

Same keys and units as vLLM's result JSON (``vllm/benchmarks/serve.py``): ``completed``,
``failed``, ``num_prompts``, ``max_concurrency``, ``request_rate``, ``burstiness``, ``duration``
(s), token totals, ``request_throughput`` / ``output_throughput`` / ``total_token_throughput``,
and for each of ``ttft``, ``tpot``, ``itl`` and ``e2el`` its ``mean_*_ms``, ``median_*_ms``,
``std_*_ms`` and ``p{P}_*_ms`` for the chosen percentiles (99 by default, as vLLM;
``--metric-percentiles`` of a pasted line), computed as vLLM computes them (``np.std`` with
ddof 0, ``np.percentile`` linear, 0 for an empty list). Plus a ``kvsim`` key: the cost model, its
basis and error band, the trace, and how each figure was derived. A user can diff the file
against a real result, and ``kvsim calibrate check`` reads it like one.

How the figures map (all from the per-request table):

- a request is *sent* at its ``arrival_s``; ``duration`` runs from t = 0 (the benchmark's start)
  to the last finish; ``completed`` = finished requests, ``failed`` = the others (rejected, or
  unfinished when the run ended).
- TTFT = first token - arrival; E2EL = finish - arrival; TPOT = (E2EL - TTFT) / (output - 1)
  over requests with more than one output token, as vLLM.
- **ITL is derived, not measured.** vLLM pools every gap between streamed tokens. kvsim records
  each request's first and last token, not the steps in between, so each request contributes
  ``output - 1`` gaps all equal to its own TPOT. The ITL mean is exact (the pooled mean is the
  token-weighted TPOT); its median, std and percentiles miss the step-to-step variation inside a
  request (a decode step slowed by a prefill chunk): real tails are wider.
- ``max_output_tokens_per_s`` needs per-token times: null. ``max_concurrent_requests``: the
  most requests between send and last token at once.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ConfigError

ITL_NOTE = ("derived: each request's output-1 gaps taken equal to its TPOT (kvsim keeps no per-token times); "
            "the mean is exact, the spread misses within-request step variation")


def pooled_percentile(values: np.ndarray, counts: np.ndarray, p: float) -> float:
    """``np.percentile(np.repeat(values, counts), p)`` (linear) without building the repeat."""
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(counts[order])
    pos = p / 100.0 * (cum[-1] - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    a, b = v[np.searchsorted(cum, lo, side="right")], v[np.searchsorted(cum, hi, side="right")]
    return float(a + (b - a) * (pos - lo))


def _stats(name: str, ms: np.ndarray, pcts: Sequence[float], counts: np.ndarray | None = None) -> dict[str, float]:
    """vLLM's mean/median/std/pP of one metric in ms (``counts``: pooled repeats)."""
    if len(ms) == 0 or (counts is not None and counts.sum() == 0):
        return {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"std_{name}_ms": 0.0,
                **{f"p{_word(p)}_{name}_ms": 0.0 for p in pcts}}
    if counts is None:
        mean, std = float(np.mean(ms)), float(np.std(ms))
        q = [float(np.percentile(ms, p)) for p in (50, *pcts)]
    else:
        mean = float(np.sum(ms * counts) / counts.sum())
        std = float(math.sqrt(np.sum(counts * (ms - mean) ** 2) / counts.sum()))
        q = [pooled_percentile(ms, counts, p) for p in (50, *pcts)]
    return {f"mean_{name}_ms": mean, f"median_{name}_ms": q[0], f"std_{name}_ms": std,
            **{f"p{_word(p)}_{name}_ms": v for p, v in zip(pcts, q[1:], strict=True)}}


def _word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def peak_concurrency(start: np.ndarray, end: np.ndarray) -> int:
    """Most intervals [start, end) open at once (a finish before a send at the same instant)."""
    if len(start) == 0:
        return 0
    t = np.concatenate([start, end])
    d = np.concatenate([np.ones(len(start), np.int64), -np.ones(len(end), np.int64)])
    order = np.lexsort((d, t))
    return int(np.cumsum(d[order]).max())


def _offered_rate(req: pd.DataFrame) -> float | str:
    t = req["arrival_s"].to_numpy(np.float64)
    span = float(t.max() - t.min()) if len(t) else 0.0
    return len(t) / span if span > 0 else "inf"


def bench_result(req: pd.DataFrame, *, model: str, request_rate: float | None, burstiness: float | None,
                 provenance: dict[str, Any], percentiles: Sequence[float] = (99.0,)) -> dict[str, Any]:
    """The result document of a run's per-request table ``req`` (module docstring).
    ``request_rate``: the ``--request-rate`` the arrivals were drawn at, or None for a trace's own
    times (then its mean offered rate)."""
    done = req[req["status"] == "finished"]
    dur = float(done["finish_s"].max()) if len(done) else 0.0
    per = (lambda x: x / dur) if dur > 0 else (lambda x: 0.0)
    n_in, n_out = int(done["prompt_tokens"].sum()), int(done["output_tokens"].sum())
    multi = done[done["output_tokens"] > 1]
    tpot_ms = multi["tpot_s"].to_numpy(np.float64) * 1e3
    rate: float | str = _offered_rate(req) if request_rate is None else ("inf" if math.isinf(request_rate) else request_rate)
    doc: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": "kvsim", "backend": "kvsim",
        "label": None, "model_id": model, "tokenizer_id": None, "num_prompts": len(req),
        "request_rate": rate, "burstiness": burstiness if request_rate is not None else None, "max_concurrency": None,
        "duration": dur, "completed": len(done), "failed": len(req) - len(done),
        "total_input_tokens": n_in, "total_output_tokens": n_out,
        "request_throughput": per(len(done)), "request_goodput": None, "output_throughput": per(n_out),
        "total_token_throughput": per(n_in + n_out), "max_output_tokens_per_s": None,
        "max_concurrent_requests": peak_concurrency(done["arrival_s"].to_numpy(), done["finish_s"].to_numpy()),
    }
    doc |= _stats("ttft", done["ttft_s"].to_numpy(np.float64) * 1e3, percentiles)
    doc |= _stats("tpot", tpot_ms, percentiles)
    doc |= _stats("itl", tpot_ms, percentiles, multi["output_tokens"].to_numpy(np.int64) - 1)
    doc |= _stats("e2el", done["e2e_s"].to_numpy(np.float64) * 1e3, percentiles)
    doc["kvsim"] = {**provenance, "itl": ITL_NOTE, "duration": "from t = 0 (the benchmark's start) to the last finish",
                    "max_output_tokens_per_s": "null: kvsim keeps no per-token times",
                    "request_rate": "--request-rate" if request_rate is not None else "the trace's own times: "
                    "its mean rate over the arrival span"}
    return doc


def check_writable(path: Path) -> None:
    """Refuse, before a run, a result path that cannot be written (one line)."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ConfigError(f"--save-result {path}: is a directory; give a file name (e.g. {path}/result.json)")
    if not parent.is_dir():
        raise ConfigError(f"--save-result {path}: no such directory {parent}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"--save-result {path}: not writable")


def write_result(doc: dict[str, Any], path: Path) -> None:
    try:
        path.write_text(json.dumps(doc, indent=2, default=_plain))
    except OSError as e:
        raise ConfigError(f"--save-result {path}: cannot write ({e.strerror or e})") from None


def _plain(o: object) -> object:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, (tuple, set)):
        return list(o)
    raise TypeError(type(o).__name__)
