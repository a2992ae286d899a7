"""Reshape-and-cache: scatter the step's new K/V into the paged cache by slot.

``slot_mapping[i] = block_id * block_size + offset`` for new token i (int64; -1 = skip, e.g. a
padding token). Grid ``(num_tokens, num_kv_heads)``; each program copies one head_dim row of K
and of V. Timed separately in calibration because saving KV is part of every step's cost.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_ct, stride_ch,
    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    slot = tl.load(slot_ptr + tok)
    if slot >= 0:
        offs_d = tl.arange(0, HEAD_DIM)
        dst = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_ct + head * stride_ch
        k = tl.load(k_ptr + tok * stride_kt + head * stride_kh + offs_d)
        v = tl.load(v_ptr + tok * stride_vt + head * stride_vh + offs_d)
        tl.store(k_cache_ptr + dst + offs_d, k)
        tl.store(v_cache_ptr + dst + offs_d, v)


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """key/value ``[num_tokens, num_kv_heads, head_dim]`` -> caches ``[blocks, bs, kv_heads, head_dim]``."""
    assert key.shape == value.shape and key.dim() == 3, "key/value [T, Hkv, D]"
    assert k_cache.shape == v_cache.shape and k_cache.dim() == 4, "caches [B, bs, Hkv, D]"
    assert key.shape[1:] == k_cache.shape[2:], f"heads/head_dim {key.shape[1:]} vs {k_cache.shape[2:]}"
    assert key.dtype == k_cache.dtype == value.dtype == v_cache.dtype, "dtypes must match"
    assert slot_mapping.dtype == torch.int64 and slot_mapping.shape == (key.shape[0],)
    assert k_cache.stride(-1) == 1 and key.stride(-1) == 1 and value.stride(-1) == 1
    assert k_cache.stride() == v_cache.stride(), "k and v caches must share strides"
    head_dim = key.shape[2]
    assert head_dim >= 16 and head_dim & (head_dim - 1) == 0, f"head_dim {head_dim}"
    if key.shape[0] == 0:
        return
    grid = (key.shape[0], key.shape[1])
    _write_kv_kernel[grid](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim,
    )
