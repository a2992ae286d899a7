"""Per-suite measurement bodies for ``run_gpu`` (need torch + triton)."""

from __future__ import annotations

from typing import Any

from calibration.kernels import (
    build_metadata,
    choose_config,
    reference_attention,
    unified_attention,
)
from calibration.kernels.inputs import make_batch
from calibration.kernels.write_kv import write_kv
from calibration.manifest import Point


def _dtype_name(dtype: Any) -> str:
    return str(dtype).split(".")[-1]


def attention_row(p: Point, torch: Any, timer: Any, dev: str, dtype: Any) -> dict[str, Any]:
    ql, sl = p["q_lens"], p["seq_lens"]
    b = make_batch(ql, sl, p["q_heads"], p["kv_heads"], p["head_dim"], p["block_size"], dtype,
                   dev, spare_pages=1, page_order=p["page_order"])
    sms = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 132
    cfg = choose_config(ql, sl, p["q_heads"], p["kv_heads"], num_sms=sms)
    meta = build_metadata(ql, sl, cfg.block_q, dev)
    out = torch.empty_like(b.q)
    if p["paged"]:
        def fn() -> object:
            return unified_attention(b.q, b.k_cache, b.v_cache, meta, cfg,
                                     block_table=b.block_table, out=out)
    else:
        def fn() -> object:
            return unified_attention(b.q, b.k_slab, b.v_slab, meta, cfg, seq_base=b.seq_base, out=out)
    t = timer(fn)
    pairs = sum(q * (s - q + (q + 1) / 2) for q, s in zip(ql, sl, strict=True))
    return {**p, **t, "dtype": _dtype_name(dtype),
            "variant": f"bq{cfg.block_q}-gp{cfg.group_pad}-tn{cfg.tile_n}-seg{cfg.num_segments}",
            "n_seqs": len(ql), "n_prefill": sum(q > 1 for q in ql), "n_decode": sum(q == 1 for q in ql),
            "sum_q": sum(ql), "sum_ctx": sum(sl), "sum_pairs": pairs, "max_ctx": max(sl),
            "pages_touched": b.pages_touched if p["paged"] else 0}


def kv_write_row(p: Point, torch: Any, timer: Any, dev: str, dtype: Any) -> dict[str, Any]:
    n, hkv, d, bs = p["n"], p["kv_heads"], p["head_dim"], p["block_size"]
    blocks = max(2, -(-n // bs) * 2)
    k_cache = torch.zeros((blocks, bs, hkv, d), dtype=dtype, device=dev)
    v_cache = torch.zeros_like(k_cache)
    key = torch.randn((n, hkv, d), device=dev).to(dtype)
    value = torch.randn((n, hkv, d), device=dev).to(dtype)
    slots = torch.randperm(blocks * bs, device=dev)[:n].to(torch.int64)
    t = timer(lambda: write_kv(key, value, k_cache, v_cache, slots))
    return {**p, **t, "dtype": _dtype_name(dtype)}


def copy_row(p: Point, torch: Any, timer: Any, dev: str) -> dict[str, Any]:
    n, kind = p["bytes"], p["kind"]
    gpu = dev == "cuda"
    host = torch.empty(n, dtype=torch.uint8, pin_memory=gpu)
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty(n, dtype=torch.uint8, device=dev)
    if kind == "d2d":
        def fn() -> object:
            return b.copy_(a)
    elif kind == "h2d":
        def fn() -> object:
            return a.copy_(host, non_blocking=True)
    else:
        def fn() -> object:
            return host.copy_(a, non_blocking=True)
    t = timer(fn)
    moved = 2 * n if kind == "d2d" else n  # d2d: read + write, as in specs.md's 4.3 TB/s
    return {**p, **t, "gbps": moved / (t["t_us_median"] * 1e-6) / 1e9}


def correctness_check(torch: Any, dtype: Any) -> dict[str, float]:
    """Each kernel variant vs the torch reference on a small mixed batch, before timing."""
    errs: dict[str, float] = {}
    ql, sl = [37, 1, 1, 20], [300, 2000, 77, 20]
    for bs in (8, 16, 128):
        b = make_batch(ql, sl, 32, 8, 128, bs, dtype, "cuda")
        ref = reference_attention(b.q, b.k_cache, b.v_cache, ql, sl, b.block_table).float()
        for nseg in (1, 4):
            cfg = choose_config(ql, sl, 32, 8, num_segments=nseg)
            meta = build_metadata(ql, sl, cfg.block_q, "cuda")
            o = unified_attention(b.q, b.k_cache, b.v_cache, meta, cfg, block_table=b.block_table)
            s = unified_attention(b.q, b.k_slab, b.v_slab, meta, cfg, seq_base=b.seq_base)
            errs[f"bs{bs}-seg{nseg}-paged"] = float((o.float() - ref).abs().max())
            errs[f"bs{bs}-seg{nseg}-slab"] = float((s.float() - ref).abs().max())
    bad = {k: v for k, v in errs.items() if not v < 5e-2}
    if bad:
        raise SystemExit(f"kernel does not match the torch reference: {bad}")
    return errs
