"""Per-suite measurement bodies for ``run_gpu`` (need torch + triton)."""

from __future__ import annotations

from typing import Any

from calibration.kernels import (
    build_metadata,
    choose_config,
    reference_attention,
    unified_attention,
)
from calibration.kernels.inputs import SLAB_GAP, PagedBatch, make_batch
from calibration.kernels.write_kv import write_kv
from calibration.manifest import Point


def _dtype_name(dtype: Any) -> str:
    return str(dtype).split(".")[-1]


def timing_batch(torch: Any, q_lens: list[int], seq_lens: list[int], hq: int, hkv: int, d: int,
                 bs: int, dtype: Any, dev: str, *, paged: bool, page_order: str = "random",
                 seed: int = 0) -> PagedBatch:
    """A batch for timing, built on the device and in the one layout timed (paged pool or slabs).

    ``make_batch`` fills both layouts on the host with NaN poison, which is right for correctness
    but takes about a minute for a 256 x 8k decode; timing only needs random values where the
    kernel reads. The unused layout is a one-row placeholder. Pages are randomly permuted (or
    sequential, the control), with one spare page that padded table entries point at.
    """
    g = torch.Generator(device=dev).manual_seed(seed)
    host = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> Any:
        return torch.randn(shape, generator=g, dtype=dtype, device=dev)

    n, pages = len(seq_lens), [-(-s // bs) for s in seq_lens]
    used = sum(pages)
    q = rnd(sum(q_lens), hq, d)
    table = torch.full((n, max(pages) + 1), used, dtype=torch.int32)  # page `used` is the spare
    if paged:
        order = torch.randperm(used, generator=host) if page_order == "random" else torch.arange(used)
        per = torch.tensor(pages)
        rows = torch.repeat_interleave(torch.arange(n), per)
        cols = torch.arange(used) - torch.repeat_interleave(torch.cumsum(per, 0) - per, per)
        table[rows, cols] = order.to(torch.int32)
    k_cache = rnd(used + 1 if paged else 1, bs, hkv, d)
    v_cache = rnd(*k_cache.shape)
    bases = [SLAB_GAP + sum(seq_lens[:i]) + SLAB_GAP * i for i in range(n)]
    k_slab = rnd(1 if paged else bases[-1] + seq_lens[-1] + SLAB_GAP, hkv, d)
    v_slab = rnd(*k_slab.shape)
    return PagedBatch(q=q, k_cache=k_cache, v_cache=v_cache, block_table=table.to(dev),
                      k_slab=k_slab, v_slab=v_slab,
                      seq_base=torch.tensor(bases, dtype=torch.int32, device=dev),
                      q_lens=list(q_lens), seq_lens=list(seq_lens))


def attention_row(p: Point, torch: Any, timer: Any, dev: str, dtype: Any) -> dict[str, Any]:
    ql, sl = p["q_lens"], p["seq_lens"]
    b = timing_batch(torch, ql, sl, p["q_heads"], p["kv_heads"], p["head_dim"], p["block_size"],
                     dtype, dev, paged=p["paged"], page_order=p["page_order"])
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
