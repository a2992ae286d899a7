"""The harness's measurement points (kernel-and-calibration.md §7). Standard library only.

Every point is a flat dict with a stable ``point_id`` so a second run skips what is done.
Order = priority: a run cut short by ``--budget-s`` still has copy bandwidth, the KV write, the
core attention grid and the held-out mixed batches before the rest.
"""

from __future__ import annotations

import random
import re
import zlib
from pathlib import Path
from typing import Any

Point = dict[str, Any]
MODELS_YAML = Path(__file__).resolve().parents[1] / "sim" / "specs" / "models.yaml"
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


def gemm_shapes(shapes: dict[str, dict[str, int]]) -> list[tuple[str, int, int]]:
    """Unique (op, K, M) of QKV, O, gate+up, down and the LM head at TP 1."""
    seen: dict[tuple[int, int], str] = {}
    for key, s in shapes.items():
        d, h, f = s["head_dim"], s["hidden"], s["ffn"]
        for op, k, m in (("qkv", h, (s["heads"] + 2 * s["kv_heads"]) * d), ("o", s["heads"] * d, h),
                         ("up", h, 2 * f), ("down", f, h), ("lm_head", h, s["vocab"])):
            seen.setdefault((k, m), f"{key}:{op}")
    return [(name, k, m) for (k, m), name in seen.items()]


def _attn(kind: str, q_lens: list[int], seq_lens: list[int], hq: int, hkv: int, d: int, bs: int,
          paged: bool, order: str = "random") -> Point:
    tag = f"{hq}x{hkv}x{d}-bs{bs}-{'paged' if paged else 'slab'}-{order}"
    key = f"{kind}:{tag}:{sum(q_lens)}:{sum(seq_lens)}:{len(q_lens)}:{zlib.crc32(repr((q_lens, seq_lens)).encode()):08x}"
    return {"suite": "attention", "point_id": key, "kind": kind, "q_lens": q_lens,
            "seq_lens": seq_lens, "q_heads": hq, "kv_heads": hkv, "head_dim": d,
            "block_size": bs, "paged": paged, "page_order": order}


def attention_points(cpu: bool, seed: int = 0) -> list[Point]:
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
    pts: list[Point] = []
    for paged in (True, False):
        for bs in bss if paged else bss[:1]:  # the slab ignores block_size
            pts += [_attn("decode", [1] * b, [c] * b, hq, hkv, d, bs, paged) for b, c in decode]
            pts += [_attn("prefill", [q], [p + q], hq, hkv, d, bs, paged) for q, p in prefill]
    mixed: list[Point] = []
    for _ in range(n_mixed):  # random mixed batches: held out of the fit, validation only
        nd, npf = rng.randint(0, 24 if not cpu else 3), rng.randint(1, 3)
        ql = [rng.randint(1, max_chunk) for _ in range(npf)] + [1] * nd
        sl = [q + rng.randint(0, max_ctx) for q in ql]
        for paged in (True, False):
            for bs in (bss if paged else bss[:1]):
                mixed.append(_attn("mixed", ql, sl, hq, hkv, d, bs, paged))
    if not cpu:  # control: sequential physical pages; second GQA shape (70B at TP 8)
        pts += [_attn("decode", [1] * b, [c] * b, hq, hkv, d, 16, True, "sequential")
                for b, c in decode]
        pts += [_attn("decode", [1] * b, [c] * b, 8, 1, d, bs, True) for b, c in decode
                for bs in (16, 128)]
    return pts[: len(pts) // 2] + mixed + pts[len(pts) // 2:]


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


def gemm_points(cpu: bool) -> list[Point]:
    if cpu:
        shapes = [("tiny:qkv", 64, 128), ("tiny:down", 256, 64), ("tiny:up", 64, 512)]
        ns: tuple[int, ...] = (1, 16, 64)
    else:
        shapes = gemm_shapes(catalog_shapes())
        ns = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    return [{"suite": "gemm", "point_id": f"gemm:{name}:{n}", "op": name, "n": n, "k": k, "m": m}
            for name, k, m in shapes for n in ns]


def manifest(cpu: bool) -> list[Point]:
    pts = other_points(cpu)
    att = attention_points(cpu)
    gem = gemm_points(cpu)
    half = len(att) // 2
    return pts + att[:half] + gem + att[half:]
