"""Reader + fit for Vidur's published operator timings (``$KVSIM_DATA/gpu_profiles/vidur``).

Source: github.com/microsoft/vidur @ 7d47513, ``data/profiling/`` (MIT; Agrawal et al., MLSys
2024). Times are per call of one operator on one GPU (one layer), in milliseconds (median column
used). We fit the *same* model form as for our own kernel (``sim.cost.features``), so this is
the form's first test on real GPU data; the fitted dense / all-reduce terms are used for A100 and
H100 in the calibrated cost model, labelled ``vidur profiles <gpu>``.

Vidur's ``a100`` is an A100-80GB SXM (DGX A100) and ``h100`` an H100 SXM (DGX H100).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibration.nnls_fit import FitResult, fit_terms
from calibration.public_rows import profiles_root
from sim.cost.features import (
    ATTN_TERMS,
    ELEM_TERMS,
    GEMM_TERMS,
    attention_features,
    elementwise_features,
    gemm_features,
)

DEFAULT_ROOT = profiles_root() / "vidur"  # operator profiles: only with $KVSIM_DATA (large, not shipped)
GPU_KEYS = {"a100": "a100-80gb", "h100": "h100"}  # Vidur device name -> our catalog key
PEAKS = {"a100": (2.039e12, 312e12), "h100": (3.35e12, 989e12)}  # datasheet BW, bf16 FLOP/s
BLOCK_SIZE = 16  # every Vidur attention row
DTYPE_BYTES = 2  # fp16 profiles; all-reduce sizes are fp16 elements
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEM_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
SOURCE = "vidur profiles (github.com/microsoft/vidur@7d47513, MIT)"


def _ms(df: pd.DataFrame, op: str) -> pd.Series:
    return df[f"time_stats.{op}.median"].astype(float) / 1e3


def attention_table(root: Path = DEFAULT_ROOT, gpu: str = "a100") -> pd.DataFrame:
    """One row per measured point with the cost-model features' inputs and ``t_s``."""
    paths = sorted((root / "compute" / gpu).glob("*/*/attention.csv"))
    rows = []
    for p in paths:
        a = pd.read_csv(p)
        tp = a["num_tensor_parallel_workers"].astype(int)
        hq = a["n_q_head"] // tp
        hkv = np.maximum(1, a["n_kv_head"] // tp)
        d = a["n_embd"] // a["n_q_head"]
        pre = a["is_prefill"].astype(bool)
        kv = a["kv_cache_size"].astype(int)
        chunk = a["prefill_chunk_size"].astype(int)
        b = a["batch_size"].astype(int)
        ctx = np.where(pre, kv + chunk, kv)
        rows.append(pd.DataFrame({
            "model": p.parent.name, "phase": np.where(pre, "prefill", "decode"),
            "n_seqs": np.where(pre, 1, b), "n_tokens": np.where(pre, chunk, b),
            "kv_tokens": np.where(pre, ctx, b * ctx),
            "attn_pairs": np.where(pre, chunk * (kv + (chunk + 1) / 2), b * ctx),
            "pages": np.where(pre, 1, b) * -(-ctx // BLOCK_SIZE),
            "q_heads": hq, "kv_heads": hkv, "head_dim": d,
            "t_s": np.where(pre, _ms(a, "attn_prefill"), _ms(a, "attn_decode")),
        }))
    if not rows:
        return pd.DataFrame()
    out = pd.concat(rows, ignore_index=True)
    return out[out["t_s"] > 0].reset_index(drop=True)


def attention_x(df: pd.DataFrame) -> np.ndarray:
    return attention_features(df["n_seqs"], df["n_tokens"], df["kv_tokens"], df["attn_pairs"],
                              df["pages"], q_heads=df["q_heads"], kv_heads=df["kv_heads"],
                              head_dim=df["head_dim"], dtype_bytes=DTYPE_BYTES)


def gemm_shapes(m: pd.DataFrame) -> dict[str, tuple[pd.Series, pd.Series]]:
    """(K, M) of each dense op on one GPU, from Vidur's shape columns."""
    tp = m["num_tensor_parallel_workers"].astype(int)
    d = m["n_embd"] // m["n_head"]
    hq, hkv = m["n_head"] // tp, np.maximum(1, m["n_kv_head"] // tp)
    ffn = m["n_expanded_embd"] // tp
    up = np.where(m["use_gated_mlp"].astype(bool), 2 * ffn, ffn)
    h = m["n_embd"]
    return {"attn_pre_proj": (h, (hq + 2 * hkv) * d), "attn_post_proj": (hq * d, h),
            "mlp_up_proj": (h, pd.Series(up, index=m.index)), "mlp_down_proj": (ffn, h)}


def mlp_tables(root: Path = DEFAULT_ROOT, gpu: str = "a100") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(gemm rows: op, n, k, m, t_s ; elementwise rows: n, hidden, ffn_per_gpu, t_s)."""
    gem, ele = [], []
    for p in sorted((root / "compute" / gpu).glob("*/*/mlp.csv")):
        m = pd.read_csv(p)
        n = m["num_tokens"].astype(int)
        for op, (k, mm) in gemm_shapes(m).items():
            gem.append(pd.DataFrame({"model": p.parent.name, "op": op, "n": n, "k": k, "m": mm,
                                     "t_s": _ms(m, op)}))
        tp = m["num_tensor_parallel_workers"].astype(int)
        ele.append(pd.DataFrame({"model": p.parent.name, "n": n, "hidden": m["n_embd"],
                                 "ffn_per_gpu": m["n_expanded_embd"] // tp,
                                 "t_s": sum(_ms(m, op) for op in ELEM_OPS)}))
    g = pd.concat(gem, ignore_index=True) if gem else pd.DataFrame()
    e = pd.concat(ele, ignore_index=True) if ele else pd.DataFrame()
    return g, e


def allreduce_table(root: Path = DEFAULT_ROOT, gpu: str = "a100") -> pd.DataFrame:
    """Single-node (NVSwitch DGX) all-reduce: median over ranks per (workers, bytes)."""
    p = root / "network" / f"{gpu}_dgx" / "all_reduce.csv"
    if not p.exists():
        return pd.DataFrame()
    r = pd.read_csv(p)
    r = r[r["devices_per_node"] == r["num_workers"]]
    r = r.assign(bytes=r["size"] * DTYPE_BYTES, t_s=_ms(r, "all_reduce"))
    return r.groupby(["num_workers", "bytes"], as_index=False)["t_s"].median()


def fit_allreduce(df: pd.DataFrame) -> dict[int, FitResult]:
    out = {}
    for w, g in df.groupby("num_workers"):
        x = np.stack([np.ones(len(g)), g["bytes"].to_numpy(float)], axis=-1)
        out[int(w)] = fit_terms(x, g["t_s"].to_numpy(float), ("c0", "c_b"))
    return out


def fit_gpu(root: Path = DEFAULT_ROOT, gpu: str = "a100", seed: int = 0) -> dict[str, Any]:
    """Fit every term Vidur has for ``gpu``; returns the calibration YAML's content."""
    bw, fl = PEAKS[gpu]
    out: dict[str, Any] = {"schema": "kvsim-calibration/1", "gpu": GPU_KEYS[gpu],
                           "source": "vidur", "label": f"vidur profiles {gpu}",
                           "provenance": {"data": SOURCE, "units": "seconds per feature unit",
                                          "dtype": "fp16", "fit": "NNLS on relative error, "
                                          "20% random rows held out"}}
    att = attention_table(root, gpu)
    if len(att):
        r = fit_terms(attention_x(att), att["t_s"].to_numpy(float), ATTN_TERMS, seed=seed)
        out["attention"] = {"paged": {**r.as_dict(), "source": f"{SOURCE}: FlashAttention, "
                                      f"block_size {BLOCK_SIZE} only (c_pg not identifiable)"}}
    gem, ele = mlp_tables(root, gpu)
    if len(gem):
        x = gemm_features(gem["n"], gem["k"], gem["m"], bandwidth_bps=bw, flops=fl)
        out["gemm"] = {**fit_terms(x, gem["t_s"].to_numpy(float), GEMM_TERMS, seed=seed).as_dict(),
                       "source": SOURCE}
        xe = elementwise_features(ele["n"], ele["hidden"], ele["ffn_per_gpu"])
        out["elementwise"] = {**fit_terms(xe, ele["t_s"].to_numpy(float), ELEM_TERMS,
                                          seed=seed).as_dict(), "source": SOURCE}
    ar = allreduce_table(root, gpu)
    if len(ar):
        out["allreduce"] = {"source": f"{SOURCE}: {gpu}_dgx",
                            "by_tp": {w: r.as_dict() for w, r in fit_allreduce(ar).items()}}
    return out
