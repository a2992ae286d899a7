"""Unified varlen paged attention: prefill chunks (with a cached prefix) and decodes, one launch.

Layout (per layer)::

    k_cache, v_cache  [num_blocks, block_size, num_kv_heads, head_dim]   head_dim contiguous
    block_table       int32 [num_seqs, max_blocks]      token t of seq s lives in page
                      block_table[s, t // block_size], row t % block_size
    q, out            [num_tokens, num_q_heads, head_dim]   the step's new tokens, seq by seq

Sequence s has ``q_len`` new tokens (1 for a decode) that are the last ``q_len`` positions of its
``seq_len`` keys (cached prefix + the chunk itself; its K/V must already be in the cache).

Grid ``(num_q_blocks, num_kv_heads, num_segments)``. A program owns BLOCK_Q query tokens of one
sequence times GROUP_PAD query heads that share one KV head (GQA packing): BLOCK_M = BLOCK_Q x
GROUP_PAD rows, >= 16 so ``tl.dot`` is legal even for a one-token decode. It walks the keys in
tiles of TILE_N tokens, independent of the page size, with an fp32 online softmax, and stops at
the last key its last query may see (causal pruning). With ``num_segments > 1`` (split-K, for
long decodes that would under-fill the GPU) each program covers a slice of the tiles and writes
partial (max, sum, acc); a reduce kernel merges them by log-sum-exp.

``PAGED=False`` is the same body reading one contiguous slab per sequence (row
``seq_base[s] + t`` of a ``[rows, num_kv_heads, head_dim]`` tensor; the block table is never read),
so time(PAGED=True) - time(PAGED=False) is exactly the cost of paging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

SUPPORTED_BLOCK_SIZES = (8, 16, 32, 64, 128)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # fp32: tests only (tf32 on GPU)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class AttentionConfig:
    """Launch configuration (chosen in Python: multi-config autotune cannot run on CPU)."""

    block_q: int  # query tokens per program
    group_pad: int  # next power of two >= q heads per KV head
    tile_n: int  # keys per inner-loop tile (independent of block_size)
    num_segments: int = 1  # > 1: split-K
    num_warps: int = 4
    num_stages: int = 2

    @property
    def block_m(self) -> int:
        return self.block_q * self.group_pad


@dataclass(frozen=True)
class AttentionMetadata:
    """Per-step index tensors, built on the host before launch (outside any timed region)."""

    cu_seqlens_q: torch.Tensor  # int32 [num_seqs + 1]
    seq_lens: torch.Tensor  # int32 [num_seqs]
    qblock_seq: torch.Tensor  # int32 [num_q_blocks]: sequence of each q-block
    qblock_start: torch.Tensor  # int32 [num_q_blocks]: first query index (within its seq)
    num_tokens: int
    max_seq_len: int
    max_q_len: int

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.numel())

    @property
    def num_q_blocks(self) -> int:
        return int(self.qblock_seq.numel())


def choose_config(
    q_lens: list[int],
    seq_lens: list[int],
    num_q_heads: int,
    num_kv_heads: int,
    *,
    num_sms: int = 132,
    tile_n: int | None = None,
    block_m: int | None = None,
    num_segments: int | None = None,
) -> AttentionConfig:
    """Pick BLOCK_Q / TILE_N / split-K from the batch shape.

    Split-K when the grid would leave the GPU under-filled (q_blocks x kv_heads < 2 x SMs) and the
    longest context is >= 1024 tokens; segments chosen for about 2 waves, at most 16, and at least
    4 tiles each.
    """
    group_pad = next_pow2(num_q_heads // num_kv_heads)
    decode_only = max(q_lens) == 1
    bm = block_m or (16 if decode_only else 64)
    bm = max(bm, group_pad, 16)
    block_q = max(1, bm // group_pad)
    tn = tile_n or (16 if decode_only else 32)
    if num_segments is None:
        q_blocks = sum(triton.cdiv(q, block_q) for q in q_lens)
        programs = q_blocks * num_kv_heads
        max_ctx = max(seq_lens)
        num_segments = 1
        if programs < 2 * num_sms and max_ctx >= 1024:
            want = triton.cdiv(2 * num_sms, programs)
            most = max(1, triton.cdiv(max_ctx, 4 * tn))
            num_segments = min(16, next_pow2(want), next_pow2(most))
    return AttentionConfig(block_q=block_q, group_pad=group_pad, tile_n=tn,
                           num_segments=max(1, num_segments))


def build_metadata(
    q_lens: list[int], seq_lens: list[int], block_q: int, device: torch.device | str
) -> AttentionMetadata:
    """Index tensors for a batch: q_lens[i] new tokens of sequence i, seq_lens[i] keys in total."""
    assert len(q_lens) == len(seq_lens) and q_lens, "q_lens and seq_lens: same non-zero length"
    assert all(1 <= q <= s for q, s in zip(q_lens, seq_lens, strict=True)), "need 1 <= q_len <= seq_len"
    cu = [0]
    qb_seq: list[int] = []
    qb_start: list[int] = []
    for i, q in enumerate(q_lens):
        cu.append(cu[-1] + q)
        for start in range(0, q, block_q):
            qb_seq.append(i)
            qb_start.append(start)

    def t(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.int32, device=device)

    return AttentionMetadata(
        cu_seqlens_q=t(cu), seq_lens=t(seq_lens), qblock_seq=t(qb_seq), qblock_start=t(qb_start),
        num_tokens=cu[-1], max_seq_len=max(seq_lens), max_q_len=max(q_lens),
    )


@triton.jit
def _unified_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr,
    pm_ptr, pl_ptr, pacc_ptr,  # split-K partials (unused when NUM_SEGMENTS == 1)
    block_table_ptr, seq_base_ptr,
    cu_q_ptr, seq_lens_ptr, qb_seq_ptr, qb_start_ptr,
    scale,
    stride_qt, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_ot, stride_oh,
    stride_bt,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_Q: tl.constexpr,
    HEAD_DIM: tl.constexpr, TILE_N: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    NUM_SEGMENTS: tl.constexpr, NUM_Q_HEADS: tl.constexpr, PAGED: tl.constexpr,
):
    BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
    qb = tl.program_id(0)
    kvh = tl.program_id(1)
    seg = tl.program_id(2)

    seq = tl.load(qb_seq_ptr + qb)
    q_start = tl.load(qb_start_ptr + qb)
    tok0 = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - tok0
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix = seq_len - q_len

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    qi = q_start + offs_m // GROUP_PAD  # query index within the sequence
    hg = offs_m % GROUP_PAD
    row_ok = (qi < q_len) & (hg < GROUP)
    head = kvh * GROUP + hg
    tok = (tok0 + qi).to(tl.int64)
    q_off = tok[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptr + q_off, mask=row_ok[:, None], other=0.0)
    q_pos = prefix + qi  # absolute position: may attend keys 0..q_pos

    kv_end = tl.minimum(seq_len, prefix + q_start + BLOCK_Q)  # causal pruning
    num_tiles = tl.cdiv(kv_end, TILE_N)
    tiles_per_seg = tl.cdiv(num_tiles, NUM_SEGMENTS)
    t_lo = seg * tiles_per_seg
    t_hi = tl.minimum(num_tiles, t_lo + tiles_per_seg)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if not PAGED:
        base = tl.load(seq_base_ptr + seq).to(tl.int64)

    for t in range(t_lo, t_hi):
        offs_n = t * TILE_N + tl.arange(0, TILE_N)
        n_ok = offs_n < kv_end
        if PAGED:
            if BLOCK_SIZE >= TILE_N:  # a tile never crosses a page: one table load per tile
                page = tl.load(block_table_ptr + seq * stride_bt + (t * TILE_N) // BLOCK_SIZE)
                k_row = page.to(tl.int64) * stride_kb + (offs_n % BLOCK_SIZE) * stride_kt
                v_row = page.to(tl.int64) * stride_vb + (offs_n % BLOCK_SIZE) * stride_vt
            else:  # a tile spans several pages: gather the page of every token
                pages = tl.load(block_table_ptr + seq * stride_bt + offs_n // BLOCK_SIZE,
                                mask=n_ok, other=0)
                k_row = pages.to(tl.int64) * stride_kb + (offs_n % BLOCK_SIZE) * stride_kt
                v_row = pages.to(tl.int64) * stride_vb + (offs_n % BLOCK_SIZE) * stride_vt
        else:
            k_row = (base + offs_n) * stride_kt
            v_row = (base + offs_n) * stride_vt
        k = tl.load(k_ptr + k_row[:, None] + kvh * stride_kh + offs_d[None, :],
                    mask=n_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        ok = row_ok[:, None] & n_ok[None, :] & (offs_n[None, :] <= q_pos[:, None])
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # fully masked rows stay finite
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + v_row[:, None] + kvh * stride_vh + offs_d[None, :],
                    mask=n_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    if NUM_SEGMENTS == 1:
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        o = acc / l_safe[:, None]
        o_off = tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(out_ptr + o_off, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:
        row = (tok * NUM_Q_HEADS + head) * NUM_SEGMENTS + seg  # partials [tokens, heads, segs]
        tl.store(pm_ptr + row, m_i, mask=row_ok)
        tl.store(pl_ptr + row, l_i, mask=row_ok)
        tl.store(pacc_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=row_ok[:, None])


@triton.jit
def _reduce_segments_kernel(
    out_ptr, pm_ptr, pl_ptr, pacc_ptr, stride_ot, stride_oh,
    NUM_Q_HEADS: tl.constexpr, NUM_SEGMENTS: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    offs_s = tl.arange(0, NUM_SEGMENTS)
    offs_d = tl.arange(0, HEAD_DIM)
    row = (tok * NUM_Q_HEADS + head) * NUM_SEGMENTS + offs_s
    m = tl.load(pm_ptr + row)
    lsum = tl.load(pl_ptr + row)
    m_max = tl.max(m, 0)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.exp(m - m_safe)
    total = tl.sum(lsum * w, 0)
    total = tl.where(total == 0.0, 1.0, total)
    acc = tl.load(pacc_ptr + row[:, None] * HEAD_DIM + offs_d[None, :])
    o = tl.sum(acc * w[:, None], 0) / total
    tl.store(out_ptr + tok * stride_ot + head * stride_oh + offs_d, o.to(out_ptr.dtype.element_ty))


def _check_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: AttentionConfig,
                  paged: bool) -> None:
    """Assertions the interpreter would not catch (it is more permissive than the compiler)."""
    assert q.dim() == 3 and k.dim() == 4 and k.shape == v.shape, "q [T,Hq,D]; k/v [B,bs,Hkv,D]"
    assert q.dtype == k.dtype == v.dtype and q.dtype in SUPPORTED_DTYPES, f"dtypes {q.dtype} {k.dtype}"
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1, "head_dim must be contiguous"
    head_dim, hq, hkv = q.shape[2], q.shape[1], k.shape[2]
    assert k.shape[3] == head_dim and _is_pow2(head_dim) and head_dim >= 16, f"head_dim {head_dim}"
    assert hq % hkv == 0, f"{hq} q heads not a multiple of {hkv} kv heads"
    assert next_pow2(hq // hkv) == cfg.group_pad, "config built for another GQA ratio"
    assert _is_pow2(cfg.block_m) and cfg.block_m >= 16, f"BLOCK_M {cfg.block_m}"
    assert _is_pow2(cfg.tile_n) and cfg.tile_n >= 16, f"TILE_N {cfg.tile_n}"
    assert _is_pow2(cfg.num_segments), f"num_segments {cfg.num_segments}"
    if paged:
        assert k.shape[1] in SUPPORTED_BLOCK_SIZES, f"block_size {k.shape[1]} not in {SUPPORTED_BLOCK_SIZES}"


def unified_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    cfg: AttentionConfig,
    *,
    block_table: torch.Tensor | None = None,
    seq_base: torch.Tensor | None = None,
    scale: float | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch the kernel. Pass ``block_table`` (paged) or ``seq_base`` with a 3-D slab (contiguous)."""
    paged = block_table is not None
    assert paged != (seq_base is not None), "pass exactly one of block_table / seq_base"
    if not paged:
        assert k_cache.dim() == 3, "contiguous variant: k/v slab [rows, num_kv_heads, head_dim]"
        k_cache, v_cache = k_cache.unsqueeze(0), v_cache.unsqueeze(0)
    _check_launch(q, k_cache, v_cache, cfg, paged)
    assert q.shape[0] == meta.num_tokens, f"q has {q.shape[0]} tokens, metadata {meta.num_tokens}"
    hq, d = q.shape[1], q.shape[2]
    hkv = k_cache.shape[2]
    if paged:
        assert block_table is not None
        assert block_table.dtype == torch.int32 and block_table.dim() == 2
        assert block_table.shape[0] == meta.num_seqs and block_table.stride(1) == 1
        assert block_table.shape[1] * k_cache.shape[1] >= meta.max_seq_len, "block table too short"
        bt, base, stride_bt = block_table, meta.seq_lens, block_table.stride(0)
    else:
        assert seq_base is not None and seq_base.dtype == torch.int32
        assert seq_base.shape == (meta.num_seqs,)
        bt, base, stride_bt = meta.seq_lens, seq_base, 0
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.dtype == q.dtype and out.stride(-1) == 1
    nseg = cfg.num_segments
    if nseg > 1:
        pm = torch.empty((meta.num_tokens, hq, nseg), dtype=torch.float32, device=q.device)
        pl = torch.empty_like(pm)
        pacc = torch.empty((meta.num_tokens, hq, nseg, d), dtype=torch.float32, device=q.device)
    else:
        pm = pl = pacc = out  # never touched
    grid = (meta.num_q_blocks, hkv, nseg)
    _unified_attention_kernel[grid](
        q, k_cache, v_cache, out, pm, pl, pacc, bt, base,
        meta.cu_seqlens_q, meta.seq_lens, meta.qblock_seq, meta.qblock_start,
        scale if scale is not None else d ** -0.5,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1), stride_bt,
        GROUP=hq // hkv, GROUP_PAD=cfg.group_pad, BLOCK_Q=cfg.block_q, HEAD_DIM=d,
        TILE_N=cfg.tile_n, BLOCK_SIZE=k_cache.shape[1] if paged else 1,
        NUM_SEGMENTS=nseg, NUM_Q_HEADS=hq, PAGED=paged,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if nseg > 1:
        _reduce_segments_kernel[(meta.num_tokens, hq)](
            out, pm, pl, pacc, out.stride(0), out.stride(1),
            NUM_Q_HEADS=hq, NUM_SEGMENTS=nseg, HEAD_DIM=d, num_warps=4,
        )
    return out
