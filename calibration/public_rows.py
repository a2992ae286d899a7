"""Public end-to-end step times as rows: one step (a batch of prefills or of decodes) per row.

Sources (``calibration/data/public``, shipped with their licences; measured by others on DGX-A100
machines, see each SOURCE.md):

- ``splitwise/perf_model_a100.csv`` (Patel et al., ISCA 2024; splitwise-sim @ 8f99e7dc, MIT):
  Llama-2-70B at TP 2/4/8 and BLOOM-176B at TP 8. ``prompt_time`` is the prefill of the whole
  batch (one row: B prompts of P tokens); ``token_time`` one decode step at that batch, whose
  context we take as P + half the tokens actually generated ((e2e - prompt) / token + 1, capped
  by the requested output). Median of the repeated runs per configuration; a configuration's
  prefill rows differ only in the requested output length and are merged. The TP 2 batch-64
  rows are left out: SOURCE.md flags them as inconsistent, and 64 x 640 tokens of KV cannot fit
  on 2 x 80 GB next to 138 GB of weights.
- ``distserve/profiler-a100-80g.{vllm,distserve}.json`` (DistServe @ 82831f1, Apache-2.0): fitted
  coefficients, not raw timings, of vLLM and of DistServe's own engine for OPT-13B (TP 1/2/4) and
  OPT-66B (TP 2/3/4/8). Rows are the fits evaluated, by DistServe's estimator formula
  (simdistserve/estimators/time_estimator.py: prefill ``a + b sum(P) + c sum(P^2)`` ms, decode
  ``a + b sum(context) + c B`` ms, with the large-batch coefficients from B >= 95), on a grid
  inside what the GPUs can hold: prefills of B x P <= 4096 tokens, decodes whose KV (B x
  context) fits in 90 % of memory next to the weights.
- ``vidur/a100_cpu_overheads.csv`` (Vidur @ 7d47513, MIT): per-step CPU time of vLLM's serving
  loop (schedule + sampler + prepare inputs + process outputs, + Ray at TP >= 2), medians.

Held-out rows (never fitted) are every other point along each sweep (``heldout``), so a sweep's
ends are always fitted: Splitwise prompt sizes 256/1024/4096, batch sizes 2/8/32 and output
lengths 256/1024/4096; DistServe prompt sizes 256/1024 and batch sizes 2/8/32/96/192.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from sim.model.catalog import resolve_gpu, resolve_model

PUBLIC = Path(__file__).resolve().parent / "data" / "public"


def profiles_root() -> Path:
    """``$KVSIM_DATA/gpu_profiles`` when set (the full public profiles, Vidur's operators included),
    else the rows shipped in ``calibration/data/public``."""
    env = os.environ.get("KVSIM_DATA")
    if env and (Path(env) / "gpu_profiles").is_dir():
        return Path(env) / "gpu_profiles"
    return PUBLIC


PROFILES = profiles_root()
GPU = "a100-80gb"  # DGX-A100 (80 GB) for every end-to-end source here
MODELS = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b",
          "facebook/opt-13b": "opt-13b", "facebook/opt-66b": "opt-66b"}
PROMPTS = (128, 256, 512, 1024, 2048, 4096, 8192)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256)
OUTPUTS = (128, 256, 512, 1024, 2048, 4096, 8192)
REGIMES = ("prefill-bound", "decode, small batch (B <= 8)", "decode, large batch (B >= 16)")
COLUMNS = ("source", "stack", "gpu", "model", "tp", "kind", "prompt", "batch", "context", "output",
           "y_s", "regime", "heldout", "ref")


def _odd(v: int, sweep: tuple[int, ...]) -> bool:
    return sweep.index(v) % 2 == 1


def regime(kind: str, batch: int) -> str:
    return REGIMES[0] if kind == "prefill" else REGIMES[1] if batch <= 8 else REGIMES[2]


def _row(source: str, stack: str, model: str, tp: int, kind: str, prompt: int, batch: int,
         context: int, output: int, y_s: float, heldout: bool, ref: str) -> dict[str, object]:
    return dict(source=source, stack=stack, gpu=GPU, model=model, tp=tp, kind=kind, prompt=prompt,
                batch=batch, context=context, output=output, y_s=y_s, regime=regime(kind, batch),
                heldout=heldout, ref=ref)


def splitwise_rows(root: Path = PROFILES) -> pd.DataFrame:
    path = root / "splitwise" / "perf_model_a100.csv"
    d = pd.read_csv(path)
    d["line"] = np.arange(len(d)) + 2  # 1-based, after the header
    keys = ["model", "tensor_parallel", "prompt_size", "batch_size"]
    rows = []
    for (m, tp, p, b), g in d.groupby(keys):
        if tp == 2 and b == 64:
            continue  # flagged in SOURCE.md; does not fit in memory
        lines = f"{path.parent.name}/{path.name} lines {','.join(map(str, g['line']))}"
        held = _odd(int(b), BATCHES) if b > 1 else _odd(int(p), PROMPTS)
        rows.append(_row("splitwise", "splitwise", MODELS[m], int(tp), "prefill", int(p), int(b), int(p), 0,
                         float(g["prompt_time"].median()) / 1e3, held, f"{lines}: prompt_time median of {len(g)}"))
        for t, gt in g.groupby("token_size"):
            tok = gt["token_time"].median()
            gen = min(float(t), max(1.0, (gt["e2e_time"].median() - gt["prompt_time"].median()) / tok + 1))
            if b > 1:
                held = _odd(int(b), BATCHES)
            elif p != 512:
                held = _odd(int(p), PROMPTS)
            else:
                held = _odd(int(t), OUTPUTS)
            rows.append(_row("splitwise", "splitwise", MODELS[m], int(tp), "decode", int(p), int(b),
                             int(p + gen / 2), int(t), float(tok) / 1e3, held,
                             f"{lines}: token_time median of {len(gt)} (output {int(t)})"))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _kv_capacity(model: str, tp: int) -> int:
    m, g = resolve_model(model), resolve_gpu(GPU)
    free = 0.9 * g.memory_gb * 1e9 - m.weight_bytes / tp
    return int(free // m.kv_bytes_per_token(tp)) if free > 0 else 0


def distserve_rows(engine: str, root: Path = PROFILES) -> pd.DataFrame:
    """``engine``: ``vllm`` (stack ``vllm-2023``) or ``distserve`` (stack ``lean``)."""
    path = root / "distserve" / f"profiler-a100-80g.{engine}.json"
    doc = json.loads(path.read_text())
    stack, src = ("vllm-2023", "distserve-vllm") if engine == "vllm" else ("lean", "distserve-lean")
    rows = []
    for name, by_tp in doc.items():
        model = MODELS[name]
        for tp_s, c in by_tp.items():
            tp, ref = int(tp_s), f"{path.parent.name}/{path.name} {name} tp={tp_s}"
            a, b, q = c["prefill"]
            for n in (1, 2, 4, 8):
                for p in PROMPTS[:5]:
                    if n * p <= 4096:
                        y = (a + b * n * p + q * n * p * p) / 1e3
                        rows.append(_row(src, stack, model, tp, "prefill", p, n, p, 0, y, _odd(p, PROMPTS),
                                         f"{ref} prefill {c['prefill']}"))
            cap, th = _kv_capacity(model, tp), c["decoding_large_small_bs_threshold"]
            for n in BATCHES:
                key = "decoding_smallbs" if n < th else "decoding_largebs"
                a, b, q = c[key]
                for ctx in (256, 512, 1024, 2048):
                    if n * ctx <= cap:
                        y = (a + b * n * ctx + q * n) / 1e3
                        rows.append(_row(src, stack, model, tp, "decode", ctx, n, ctx, 0, y, _odd(n, BATCHES),
                                         f"{ref} {key} {c[key]}"))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def vidur_cpu_rows(root: Path = PROFILES) -> pd.DataFrame:
    """vLLM's measured CPU time per step (seconds) by TP and batch size (A100 host)."""
    path = root / "vidur" / "a100_cpu_overheads.csv"
    d = pd.read_csv(path)
    ops = ["schedule_median", "sampler_e2e_median", "prepare_inputs_e2e_median", "process_model_outputs_median"]
    tp = d["tensor_parallel_degree"].astype(int)
    cpu = d[ops].sum(axis=1) + np.where(tp > 1, d["ray_comm_time_mean"], 0.0)
    return pd.DataFrame({"tp": tp, "batch": d["batch_size"].astype(int), "cpu_s": cpu / 1e3,
                         "ref": [f"vidur/{path.name} line {i + 2} ({m})" for i, m in enumerate(d["model_name"])]})


def end_to_end_rows(root: Path = PROFILES) -> pd.DataFrame:
    return pd.concat([splitwise_rows(root), distserve_rows("vllm", root), distserve_rows("distserve", root)],
                     ignore_index=True)
