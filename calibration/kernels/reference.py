"""Plain torch reference for the unified kernel (fp32 math, one sequence at a time)."""

from __future__ import annotations

import torch


def gather_kv(cache: torch.Tensor, block_table_row: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Keys (or values) 0..seq_len-1 of one sequence from a paged cache -> [seq_len, Hkv, D]."""
    block_size = cache.shape[1]
    pos = torch.arange(seq_len, device=cache.device)
    pages = block_table_row[pos // block_size].long()
    return cache[pages, pos % block_size]


def reference_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    q_lens: list[int],
    seq_lens: list[int],
    block_table: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's last q_len positions over its seq_len keys."""
    hq, d = q.shape[1], q.shape[2]
    group = hq // k_cache.shape[2]
    scale = d ** -0.5 if scale is None else scale
    out = torch.empty_like(q)
    start = 0
    for i, (ql, sl) in enumerate(zip(q_lens, seq_lens, strict=True)):
        k = gather_kv(k_cache, block_table[i], sl).float().repeat_interleave(group, dim=1)
        v = gather_kv(v_cache, block_table[i], sl).float().repeat_interleave(group, dim=1)
        qi = q[start:start + ql].float()  # [ql, Hq, D]
        s = torch.einsum("qhd,khd->hqk", qi, k) * scale
        q_pos = torch.arange(sl - ql, sl, device=q.device)[:, None]
        s = s.masked_fill(torch.arange(sl, device=q.device)[None, :] > q_pos, float("-inf"))
        o = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)
        out[start:start + ql] = o.to(q.dtype)
        start += ql
    return out
