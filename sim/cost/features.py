"""Feature vectors of the step-cost model (kernel-and-calibration.md §6.2), numpy only.

Every term is a physical quantity, so one set of non-negative coefficients (seconds per unit)
transfers across models (heads, head_dim) and, scaled by datasheet ratios, across GPUs:

attention, per layer and GPU                     unit            scales with
    c0     1                                     launch          -
    c_seq  sequences                             per sequence    -
    c_row  query tokens x q_heads x head_dim x 2 x dtype   Q+O bytes   bandwidth
    c_kv   KV tokens read x 2 x kv_heads x head_dim x dtype  KV bytes  bandwidth
    c_fl   causal query-key pairs x 4 x q_heads x head_dim   FLOPs     compute
    c_pg   pages touched x kv_heads              page gathers    - (0 for a slab)

GEMM (one weight matrix K x M, N tokens)
    c0, c_w (K M dtype: weight bytes), c_act (N (K+M) dtype), c_fl (2 N K M),
    c_roof (max(bytes / BW, FLOPs / F) at datasheet peaks; its coefficient is 1 / efficiency)

elementwise ops per layer (norms, rope, activation, residual adds)
    c0, c_h (N x hidden x dtype), c_f (N x ffn_per_gpu x dtype)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike

ATTN_TERMS = ("c0", "c_seq", "c_row", "c_kv", "c_fl", "c_pg")
GEMM_TERMS = ("c0", "c_w", "c_act", "c_fl", "c_roof")
ELEM_TERMS = ("c0", "c_h", "c_f")
BANDWIDTH_TERMS = {"attention": ("c_row", "c_kv"), "gemm": ("c_w", "c_act"), "elementwise": ("c_h", "c_f")}
COMPUTE_TERMS = {"attention": ("c_fl",), "gemm": ("c_fl",), "elementwise": ()}


def _f(x: ArrayLike) -> Array:
    return np.asarray(x, dtype=np.float64)


def attention_features(
    n_seqs: ArrayLike, n_tokens: ArrayLike, kv_tokens: ArrayLike, attn_pairs: ArrayLike,
    pages: ArrayLike, *, q_heads: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike,
    dtype_bytes: ArrayLike = 2,
) -> Array:
    """Rows of ATTN_TERMS features; all inputs broadcast (scalars or 1-D arrays)."""
    ns, nt, kv, pr, pg = _f(n_seqs), _f(n_tokens), _f(kv_tokens), _f(attn_pairs), _f(pages)
    hq, hkv, d, b = _f(q_heads), _f(kv_heads), _f(head_dim), _f(dtype_bytes)
    cols = [np.ones_like(ns + nt), ns, nt * hq * d * 2 * b, kv * 2 * hkv * d * b,
            pr * 4 * hq * d, pg * hkv]
    return np.stack(np.broadcast_arrays(*cols), axis=-1)


def gemm_features(
    n: ArrayLike, k: ArrayLike, m: ArrayLike, *, bandwidth_bps: float, flops: float,
    dtype_bytes: ArrayLike = 2,
) -> Array:
    """Rows of GEMM_TERMS features for an [N, K] x [K, M] matmul."""
    nn, kk, mm, b = _f(n), _f(k), _f(m), _f(dtype_bytes)
    w = kk * mm * b
    act = nn * (kk + mm) * b
    fl = 2 * nn * kk * mm
    roof = np.maximum((w + act) / bandwidth_bps, fl / flops)
    return np.stack(np.broadcast_arrays(np.ones_like(nn), w, act, fl, roof), axis=-1)


def elementwise_features(n: ArrayLike, hidden: ArrayLike, ffn_per_gpu: ArrayLike,
                         dtype_bytes: ArrayLike = 2) -> Array:
    nn, h, f, b = _f(n), _f(hidden), _f(ffn_per_gpu), _f(dtype_bytes)
    return np.stack(np.broadcast_arrays(np.ones_like(nn), nn * h * b, nn * f * b), axis=-1)


def predict(coef: Mapping[str, float], terms: tuple[str, ...], x: Array) -> Array:
    """x @ coefficients, in seconds."""
    return np.asarray(x @ np.array([float(coef.get(t, 0.0)) for t in terms]), dtype=np.float64)


def scale_coefficients(coef: Mapping[str, float], kind: str, bw_ratio: float,
                       flops_ratio: float) -> dict[str, float]:
    """Extrapolate to another GPU (§6.3): bandwidth terms x BW_src/BW_dst, FLOP terms x F_src/F_dst.

    ``c_roof`` (1 / efficiency) needs no scaling: its feature is computed with the target's peaks.
    """
    out = {}
    for t, v in coef.items():
        if t in BANDWIDTH_TERMS.get(kind, ()):
            v *= bw_ratio
        elif t in COMPUTE_TERMS.get(kind, ()):
            v *= flops_ratio
        out[t] = float(v)
    return out
