"""Unified paged-attention kernel vs the torch reference, under TRITON_INTERPRET=1 on CPU.

Tiny shapes (the interpreter costs ~5 ms per program x KV tile). Every cache slot no sequence
owns is NaN (spare pages, page tails, padded table entries, slab gaps): a bad read fails.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # must precede the first triton import
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from calibration.kernels import (  # noqa: E402
    build_metadata,
    choose_config,
    reference_attention,
    unified_attention,
)
from calibration.kernels.inputs import make_batch  # noqa: E402

pytestmark = pytest.mark.kernel

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
if not ON_GPU and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

ATOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}


@pytest.fixture
def bf16_dot_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test-only workaround: the interpreter multiplies bf16 bit patterns as integers in
    ``tl.dot`` (triton-lang/triton#11584). Convert bf16 operands to fp32 first."""
    if ON_GPU:
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp

    original = interp.InterpreterBuilder.create_dot

    def to_f32(h):  # type: ignore[no-untyped-def]
        if h.dtype.scalar != tl.bfloat16:
            return h
        data = interp._convert_float(h.data, tl.bfloat16, tl.float32, None).view(np.float32)
        return interp.TensorHandle(data.reshape(h.data.shape), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):  # type: ignore[no-untyped-def]
        return original(self, to_f32(a), to_f32(b), d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interp.InterpreterBuilder, "create_dot", create_dot)


def run_both(q_lens, seq_lens, hq, hkv, head_dim, block_size, dtype, *, seed=0, **cfg_kw):  # type: ignore[no-untyped-def]
    """Run PAGED=True and PAGED=False on the same data; return (paged, slab, reference)."""
    b = make_batch(q_lens, seq_lens, hq, hkv, head_dim, block_size, dtype, DEVICE, seed=seed)
    cfg = choose_config(q_lens, seq_lens, hq, hkv, **cfg_kw)
    meta = build_metadata(q_lens, seq_lens, cfg.block_q, DEVICE)
    paged = unified_attention(b.q, b.k_cache, b.v_cache, meta, cfg, block_table=b.block_table)
    slab = unified_attention(b.q, b.k_slab, b.v_slab, meta, cfg, seq_base=b.seq_base)
    ref = reference_attention(b.q, b.k_cache, b.v_cache, q_lens, seq_lens, b.block_table)
    return paged, slab, ref


def assert_close(out, ref, dtype) -> None:  # type: ignore[no-untyped-def]
    assert torch.isfinite(out).all(), "non-finite output: a masked or unused slot was read"
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= ATOL[dtype], f"max abs error {err:.2e} > {ATOL[dtype]:.0e}"


# A mixed step: a prefill chunk with a cached prefix, a first chunk (no prefix), two decodes.
MIXED_Q = [9, 6, 1, 1]
MIXED_S = [30, 6, 41, 17]


@pytest.mark.parametrize("block_size", [8, 16, 32, 64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mixed_batch_every_block_size(block_size: int, dtype, bf16_dot_fix) -> None:  # type: ignore[no-untyped-def]
    paged, slab, ref = run_both(MIXED_Q, MIXED_S, 8, 2, 32, block_size, dtype, seed=block_size)
    assert_close(paged, ref, dtype)
    assert_close(slab, ref, dtype)


@pytest.mark.parametrize(("hq", "hkv"), [(2, 2), (4, 2), (6, 2), (8, 1), (16, 2)])
def test_gqa_ratios(hq: int, hkv: int) -> None:
    # ratio 3 (6/2) exercises GROUP_PAD > GROUP (padded head rows).
    paged, slab, ref = run_both([5, 1], [21, 13], hq, hkv, 32, 16, torch.float16)
    assert_close(paged, ref, torch.float16)
    assert_close(slab, ref, torch.float16)


def test_fp32_tight() -> None:
    paged, slab, ref = run_both(MIXED_Q, MIXED_S, 4, 2, 32, 16, torch.float32)
    assert_close(paged, ref, torch.float32)
    assert_close(slab, ref, torch.float32)


def test_head_dim_128_mixed() -> None:
    paged, _, ref = run_both([7, 1], [19, 24], 4, 1, 128, 16, torch.float16, tile_n=16)
    assert_close(paged, ref, torch.float16)


@pytest.mark.parametrize("block_size", [8, 64])
def test_split_k_decode_matches(block_size: int) -> None:
    # Segments with no tiles (short sequence) must merge as empty.
    q_lens, seq_lens = [1, 1, 1], [95, 7, 60]
    paged, slab, ref = run_both(q_lens, seq_lens, 4, 2, 32, block_size, torch.float16,
                                num_segments=4)
    assert_close(paged, ref, torch.float16)
    assert_close(slab, ref, torch.float16)


def test_split_k_mixed(bf16_dot_fix) -> None:  # type: ignore[no-untyped-def]
    paged, _, ref = run_both(MIXED_Q, MIXED_S, 4, 2, 32, 16, torch.bfloat16, num_segments=2)
    assert_close(paged, ref, torch.bfloat16)


def test_tile_smaller_than_page_and_larger() -> None:
    # TILE_N 16 < block 64 (scalar table load per tile) and TILE_N 64 > block 8 (gather).
    for bs, tn in ((64, 16), (8, 64)):
        paged, _, ref = run_both([3, 1], [70, 33], 4, 2, 32, bs, torch.float16, tile_n=tn)
        assert_close(paged, ref, torch.float16)


def test_nan_poison_catches_a_bad_block_table() -> None:
    """The poisoning works: pointing one live table entry at a spare page gives NaN."""
    b = make_batch([1, 1], [20, 9], 4, 2, 32, 8, torch.float16, DEVICE, spare_pages=2)
    cfg = choose_config([1, 1], [20, 9], 4, 2)
    meta = build_metadata([1, 1], [20, 9], cfg.block_q, DEVICE)
    ok = unified_attention(b.q, b.k_cache, b.v_cache, meta, cfg, block_table=b.block_table)
    assert torch.isfinite(ok).all()
    bad_table = b.block_table.clone()
    bad_table[0, 1] = bad_table[0, -1]  # the padded entry points at a NaN spare page
    bad = unified_attention(b.q, b.k_cache, b.v_cache, meta, cfg, block_table=bad_table)
    assert not torch.isfinite(bad[0]).all()
    assert torch.isfinite(bad[1]).all()


def test_launch_asserts_shapes() -> None:
    b = make_batch([1], [10], 4, 2, 32, 16, torch.float16, DEVICE)
    cfg = choose_config([1], [10], 4, 2)
    meta = build_metadata([1], [10], cfg.block_q, DEVICE)
    with pytest.raises(AssertionError, match="dtypes"):
        unified_attention(b.q.float(), b.k_cache, b.v_cache, meta, cfg, block_table=b.block_table)
    with pytest.raises(AssertionError, match="block_table"):
        unified_attention(b.q, b.k_cache, b.v_cache, meta, cfg)
    with pytest.raises(AssertionError, match="GQA"):
        unified_attention(b.q, b.k_cache, b.v_cache, meta, choose_config([1], [10], 8, 1),
                          block_table=b.block_table)
    with pytest.raises(AssertionError, match="tokens"):
        meta2 = build_metadata([1, 1], [10, 10], cfg.block_q, DEVICE)
        unified_attention(b.q, b.k_cache, b.v_cache, meta2, cfg, block_table=b.block_table)
    odd = torch.zeros((2, 12, 2, 32), dtype=torch.float16, device=DEVICE)
    with pytest.raises(AssertionError, match="block_size"):
        unified_attention(b.q, odd, odd, meta, cfg, block_table=b.block_table)
    with pytest.raises(AssertionError):
        choose_config([1], [10], 4, 2, tile_n=8)  # accepted here ...
        unified_attention(b.q, b.k_cache, b.v_cache, meta, choose_config([1], [10], 4, 2, tile_n=8),
                          block_table=b.block_table)  # ... rejected at launch (TILE_N < 16)


def test_split_k_heuristic() -> None:
    # A few long decodes under-fill 132 SMs: split. Many short ones: don't.
    assert choose_config([1] * 4, [8192] * 4, 32, 8).num_segments > 1
    assert choose_config([1] * 256, [512] * 256, 32, 8).num_segments == 1
    assert choose_config([512], [512], 32, 8).num_segments == 1
