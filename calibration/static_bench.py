"""LLM-Inference-Bench static batches (vLLM 0.5.4-0.6.1, A100-40GB and H100) -> the ``vllm-0.6`` stack.

Each row is one static batch: ``Batch Size`` prompts of ``Input Output Length`` tokens generating
as many (the TTFT file: one token), on ``Num of Hardware`` GPUs with tensor parallelism;
``Latency`` is the batch's wall time. Every row is simulated once with V0's defaults
(``max_num_seqs`` 256, ``max_num_batched_tokens`` = max(max_model_len, 2048), no chunked prefill,
no prefix caching, no async scheduling), so the KV budget, the prefill chunks and any preemption
are the simulator's own. The scheduler is kvsim's V1 one with those switches: on a static batch
it gives V0's schedule (``paper-v0`` gives the same batch time within 0.3 % on the row checked,
Llama-2-7B H100 B 64 x 1024, but never fast-forwards: 10 s against 0.07 s a row). All requests arrive at t = 0, so the schedule does
not depend on the step times: the batch's time is exactly sum over steps of the stack form,
linear in the stack's coefficients (``replay.FEATURES``), and the fit is a bounded linear least
squares on relative error.

Split: held-out rows are every other length of the sweep (256 and 1024 tokens), never fitted;
Mixtral-8x7B (a MoE) is held out whole. Regimes: ``prefill-bound`` (the TTFT rows), ``decode,
B = 1`` and ``decode, B >= 16`` (TP 1), ``TP > 1`` (every row at TP 2 or 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import simpy
from scipy.optimize import lsq_linear

from calibration.public_rows import PUBLIC
from calibration.replay import FEATURES, Recorder
from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.io.ingest import make_requests
from sim.run.build import build, new_replica
from workloads.schema import Trace, validate

BENCH = PUBLIC / "llm-inference-bench"
GPUS = {"Nvidia A100 GPU": "a100-40gb", "Nvidia H100 GPU": "h100"}
#: source model -> (catalog key, max_model_len of its Hugging Face config)
MODELS = {"meta-llama/Llama-2-7b-hf": ("llama-2-7b", 4096), "meta-llama/Meta-Llama-3-8B": ("llama-3.1-8b", 8192),
          "mistralai/Mistral-7B-v0.1": ("mistral-7b", 32768), "Qwen/Qwen2-7B": ("qwen2.5-7b", 32768),
          "meta-llama/Llama-2-70b-hf": ("llama-2-70b", 4096), "meta-llama/Meta-Llama-3-70B": ("llama-3.1-70b", 8192),
          "mistralai/Mixtral-8x7B-v0.1": ("mixtral-8x7b", 32768)}
MOE_HELD_OUT = ("mixtral-8x7b",)
HELD_LENGTHS = (256, 1024)
REGIMES = ("prefill-bound", "decode, B = 1", "decode, B >= 16", "TP > 1")
STACK_TERMS = ("eta", "eta_tok", "eta_attn", "cpu_s", "per_seq_s", "prefill_s")  # FEATURES' coefficients


def bench_rows(root: Path = BENCH) -> pd.DataFrame:
    """The vLLM rows of the catalog's models, one per static batch, with split and regime."""
    try:
        a = pd.read_csv(root / "vllm_nvidia_results.csv")
        t = pd.read_csv(root / "vllm_nvidia_ttft.csv")
    except (OSError, pd.errors.ParserError) as e:
        raise ConfigError(f"{root}: cannot read the LLM-Inference-Bench rows ({e})") from None
    a = a.assign(prompt=a["Input Output Length"], output=a["Input Output Length"], source="All_results.csv")
    t = t.assign(prompt=t["Input Length"], output=t["Output Length"], source="all_results_TTFT.csv")
    d = pd.concat([a, t], ignore_index=True)
    d = d[d["Hardware"].isin(GPUS) & d["Model"].isin(MODELS) & (d["Framework"] == "vLLM")]
    d = d.drop_duplicates(["Hardware", "Num of Hardware", "Model", "prompt", "output", "Batch Size"])
    out = pd.DataFrame({
        "gpu": d["Hardware"].map(GPUS), "tp": d["Num of Hardware"].astype(int), "src_model": d["Model"],
        "model": d["Model"].map(lambda m: MODELS[m][0]), "max_model_len": d["Model"].map(lambda m: MODELS[m][1]),
        "batch": d["Batch Size"].astype(int), "prompt": d["prompt"].astype(int), "output": d["output"].astype(int),
        "y_s": d["Latency"].astype(float), "source": d["source"]})
    out["regime"] = [REGIMES[0] if o == 1 else REGIMES[3] if tp > 1 else REGIMES[1] if b == 1 else REGIMES[2]
                     for o, tp, b in zip(out["output"], out["tp"], out["batch"], strict=True)]
    out["heldout"] = out["prompt"].isin(HELD_LENGTHS) | out["model"].isin(MOE_HELD_OUT)
    out["moe"] = out["model"].isin(MOE_HELD_OUT)
    return out.reset_index(drop=True)


def simulate_row(r: pd.Series, stack: str) -> tuple[np.ndarray, float] | None:
    """(sum of the steps' FEATURES, simulated latency) of one static batch, or None when the
    simulator cannot hold the model on those GPUs (the row is then reported, not used)."""
    mlen = int(r["max_model_len"])
    try:
        cfg = make_config(where="llm-inference-bench", model=r["model"], gpu=r["gpu"], tensor_parallel_size=int(r["tp"]),
                          preset="vllm-v1-legacy", chunked_prefill=False, enable_prefix_caching=False,
                          async_scheduling=False, max_model_len=mlen, max_num_seqs=256,
                          max_num_batched_tokens=max(mlen, 2048), gpu_memory_utilization=0.9, serving_stack=stack)
        parts = build(cfg)
    except ConfigError:
        return None
    n = int(r["batch"])
    df = pd.DataFrame({"arrival_s": np.zeros(n), "prompt_tokens": np.full(n, int(r["prompt"])),
                       "output_tokens": np.full(n, int(r["output"]))})
    rec = Recorder(parts.cost)
    parts = parts._replace(cost=rec)
    reqs = make_requests(Trace(validate(df, "bench"), "bench", "static"), cfg)
    env = simpy.Environment()
    rep = new_replica(env, cfg, parts=parts)
    rep.submit_all(reqs)
    env.run()
    if any(q.finish_s is None for q in reqs):
        return None
    return np.asarray(rec.rows).sum(axis=0), float(max(q.finish_s for q in reqs))


def with_features(rows: pd.DataFrame, stack: str) -> pd.DataFrame:
    feats, sim = [], []
    for _, r in rows.iterrows():
        got = simulate_row(r, stack)
        feats.append(got[0] if got else np.full(len(FEATURES) + 1, np.nan))
        sim.append(got[1] if got else np.nan)
    out = rows.assign(sim_s=sim)
    for i, f in enumerate((*FEATURES, "floor")):
        out[f] = [x[i] for x in feats]
    return out[out["sim_s"].notna()].reset_index(drop=True)


TP_CPU = (1, 2, 4)  # cpu_s per TP degree (V0's driver sends every step to its TP workers)


def _design(d: pd.DataFrame) -> np.ndarray:
    """Columns: eta, eta_tok, eta_attn, cpu_s at TP 1, 2, 4, per_seq_s, prefill_s."""
    X = d[list(FEATURES)].to_numpy(float)
    cpu = np.stack([np.where(d["tp"].to_numpy() == t, X[:, 3], 0.0) for t in TP_CPU], axis=1)
    return np.c_[X[:, :3], cpu, X[:, 4:]]


LO = np.array([0.2, 0.2, 0.2, 0, 0, 0, 0, 0])
HI = np.array([3.0, 3.0, 3.0, 0.05, 0.05, 0.05, 1e-3, 0.1])
SCALE = np.array([1, 1, 1, 1e-3, 1e-3, 1e-3, 1e-5, 1e-3])


def fit_static(train: pd.DataFrame) -> np.ndarray:
    """theta (see :func:`_design`) minimising relative error on ``train``."""
    y = train["y_s"].to_numpy()
    A = _design(train) / y[:, None]
    keep = np.abs(A).sum(axis=0) > 0
    x = np.array([1, 1, 1, 1e-3, 1e-3, 1e-3, 0, 0], dtype=float)
    sol = lsq_linear((A * SCALE)[:, keep], 1 - train["floor"].to_numpy() / y, bounds=((LO / SCALE)[keep], (HI / SCALE)[keep]),
                     method="bvls")
    x[keep] = sol.x * SCALE[keep]
    return x


def predict_static(d: pd.DataFrame, theta: np.ndarray) -> np.ndarray:
    return np.asarray(_design(d) @ theta + d["floor"].to_numpy())


def mape_by(d: pd.DataFrame, pred: np.ndarray, keys: Sequence[str]) -> pd.DataFrame:
    e = d.assign(pred=pred, ape=np.abs(pred / d["y_s"] - 1) * 100, signed=(pred / d["y_s"] - 1) * 100)
    return e.groupby(list(keys)).agg(mape=("ape", "mean"), signed=("signed", "mean"), n=("ape", "size")).reset_index()


def leave_one_model_out(d: pd.DataFrame) -> pd.DataFrame:
    """Fit on every dense model but one (all its rows), predict that one."""
    out = []
    dense = d[~d["moe"]]
    for m in sorted(dense["model"].unique()):
        rest, left = dense[(dense["model"] != m) & ~dense["heldout"]], dense[dense["model"] == m]
        th = fit_static(rest)
        p = predict_static(left, th)
        out.append({"model": m, "n": len(left), "mape": float(np.mean(np.abs(p / left["y_s"] - 1)) * 100)})
    return pd.DataFrame(out)
