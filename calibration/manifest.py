"""The harness's measurement points (kernel-and-calibration.md §7). Standard library only.

Every point is a flat dict with a stable ``point_id`` so a second run skips what is done.
Order = priority, so a run cut short by ``--budget-s`` keeps what matters most: copy bandwidth and
the KV write; the paged (block 16) and contiguous attention grid, whose ratio is the paging
overhead; the GEMMs of Llama-3.1-8B / 70B (TP 1, 4, 8 shards); the other block sizes; the held-out
mixed batches; every other catalog GEMM; the sequential-page and second-GQA-shape controls.
"""

from __future__ import annotations

import random
import re
import zlib
from pathlib import Path
from typing import Any

Point = dict[str, Any]
MODELS_YAML = Path(__file__).resolve().parents[1] / "sim" / "model" / "data" / "models.yaml"
PRIORITY_MODELS = ("llama-3.1-8b", "llama-3.1-70b")  # their shards come first (issue 48)
PRIORITY_TP = (1, 4, 8)
HEADLINE_BLOCK = 16  # paged vs contiguous is compared at this block size
BLOCK_SIZES = (8, 16, 32, 64, 128)


def catalog_shapes(path: Path = MODELS_YAML) -> dict[str, dict[str, int]]:
    """Model shapes from models.yaml's one-line flow mappings (no pyyaml on the GPU machine)."""
    out: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([\w.\-]+):\s*\{(.*)\}\s*$", line)
        if not m:
            continue
        fields = dict(kv.split(":", 1) for kv in m.group(2).split(",") if ":" in kv)
        vals = {k.strip(): v.strip() for k, v in fields.items()}
        out[m.group(1)] = {k: int(vals[k]) for k in
                           ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab")}
    return out


def shard(s: dict[str, int], tp: int) -> dict[str, int]:
    """One GPU's share of a model at tensor parallelism ``tp``: heads, KV heads and FFN divided
    (KV heads replicated when fewer than ``tp``, as vLLM does)."""
    return {**s, "heads": s["heads"] // tp, "kv_heads": max(1, s["kv_heads"] // tp),
            "ffn": s["ffn"] // tp}


def gemm_shapes(shapes: dict[str, dict[str, int]], tp: int = 1) -> list[tuple[str, int, int]]:
    """Unique (op, K, M) of QKV, O, gate+up, down (and the LM head at TP 1) of one GPU's shard."""
    seen: dict[tuple[int, int], str] = {}
    for key, full in shapes.items():
        s = shard(full, tp)
        d, h, f = s["head_dim"], s["hidden"], s["ffn"]
        name = key if tp == 1 else f"{key}-tp{tp}"
        ops = [("qkv", h, (s["heads"] + 2 * s["kv_heads"]) * d), ("o", s["heads"] * d, h),
               ("up", h, 2 * f), ("down", f, h)] + ([("lm_head", h, s["vocab"])] if tp == 1 else [])
        for op, k, m in ops:
            seen.setdefault((k, m), f"{name}:{op}")
    return [(name, k, m) for (k, m), name in seen.items()]


def _attn(kind: str, q_lens: list[int], seq_lens: list[int], hq: int, hkv: int, d: int, bs: int,
          paged: bool, order: str = "random") -> Point:
    tag = f"{hq}x{hkv}x{d}-bs{bs}-{'paged' if paged else 'slab'}-{order}"
    key = f"{kind}:{tag}:{sum(q_lens)}:{sum(seq_lens)}:{len(q_lens)}:{zlib.crc32(repr((q_lens, seq_lens)).encode()):08x}"
    return {"suite": "attention", "point_id": key, "kind": kind, "q_lens": q_lens,
            "seq_lens": seq_lens, "q_heads": hq, "kv_heads": hkv, "head_dim": d,
            "block_size": bs, "paged": paged, "page_order": order}


def attention_points(cpu: bool, seed: int = 0) -> tuple[list[Point], list[Point]]:
    """(headline, rest): the block-16 paged + contiguous grid first, then everything else."""
    rng = random.Random(seed)
    if cpu:
        hq, hkv, d = 4, 2, 32
        bss: tuple[int, ...] = (16, 32)
        decode = [(b, c) for b in (1, 3) for c in (16, 48)]
        prefill = [(q, p) for q in (8, 24) for p in (0, 24)]
        n_mixed, max_ctx, max_chunk = 3, 48, 12
    else:
        hq, hkv, d = 32, 8, 128  # Llama-3.1-8B
        bss = BLOCK_SIZES
        decode = [(b, c) for b in (1, 4, 16, 64, 256) for c in (128, 512, 2048, 8192, 32768)
                  if b * c <= 1 << 21]
        prefill = [(q, p) for q in (16, 128, 512, 2048) for p in (0, 1024, 4096, 16384)]
        n_mixed, max_ctx, max_chunk = 40, 8192, 1024

    def grid(bs: int, paged: bool) -> list[Point]:
        return ([_attn("decode", [1] * b, [c] * b, hq, hkv, d, bs, paged) for b, c in decode]
                + [_attn("prefill", [q], [p + q], hq, hkv, d, bs, paged) for q, p in prefill])

    head = grid(HEADLINE_BLOCK, True) + grid(bss[0], False)  # the slab ignores block_size
    rest = [p for bs in bss if bs != HEADLINE_BLOCK for p in grid(bs, True)]
    for _ in range(n_mixed):  # random mixed batches: held out of the fit, validation only
        nd, npf = rng.randint(0, 24 if not cpu else 3), rng.randint(1, 3)
        ql = [rng.randint(1, max_chunk) for _ in range(npf)] + [1] * nd
        sl = [q + rng.randint(0, max_ctx) for q in ql]
        rest += [_attn("mixed", ql, sl, hq, hkv, d, bs, True) for bs in bss]
        rest.append(_attn("mixed", ql, sl, hq, hkv, d, bss[0], False))
    if not cpu:  # control: sequential physical pages; second GQA shape (70B at TP 8)
        rest += [_attn("decode", [1] * b, [c] * b, hq, hkv, d, 16, True, "sequential")
                 for b, c in decode]
        rest += [_attn("decode", [1] * b, [c] * b, 8, 1, d, bs, True) for b, c in decode
                 for bs in (16, 128)]
    return head, rest


def other_points(cpu: bool) -> list[Point]:
    mb = 1 << 20
    sizes = (mb, 16 * mb) if cpu else (2 * mb, 64 * mb, 512 * mb)
    pts: list[Point] = [{"suite": "copy", "point_id": f"copy:{k}:{s}", "kind": k, "bytes": s}
                        for k in ("d2d", "h2d", "d2h") for s in sizes]
    for n in ((1, 8, 32) if cpu else (1, 16, 256, 4096)):
        hkv, d = (2, 32) if cpu else (8, 128)
        pts.append({"suite": "kv_write", "point_id": f"kvw:{n}:{hkv}:{d}", "n": n, "kv_heads": hkv,
                    "head_dim": d, "block_size": 16})
    return pts


def gemm_points(cpu: bool) -> tuple[list[Point], list[Point]]:
    """(priority, rest): Llama-3.1-8B / 70B shards at TP 1, 4, 8 first, then the catalog."""
    if cpu:
        first = [("tiny:qkv", 64, 128), ("tiny:down", 256, 64)]
        later = [("tiny:up", 64, 512)]
        ns: tuple[int, ...] = (1, 16, 64)
    else:
        shapes = catalog_shapes()
        pick = {k: shapes[k] for k in PRIORITY_MODELS if k in shapes}
        first = [g for tp in PRIORITY_TP for g in gemm_shapes(pick, tp)]
        known = {(k, m) for _, k, m in first}
        later = [g for g in gemm_shapes(shapes) if (g[1], g[2]) not in known]
        ns = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

    def pts(gs: list[tuple[str, int, int]]) -> list[Point]:
        return [{"suite": "gemm", "point_id": f"gemm:{name}:{n}", "op": name, "n": n, "k": k, "m": m}
                for name, k, m in gs for n in ns]

    return pts(first), pts(later)


def manifest(cpu: bool) -> list[Point]:
    att_head, att_rest = attention_points(cpu)
    gem_first, gem_rest = gemm_points(cpu)
    return other_points(cpu) + att_head + gem_first + att_rest + gem_rest
