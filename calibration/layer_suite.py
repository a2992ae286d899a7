"""Decoder-layer suite: one Llama-style layer of one GPU's shard, timed as vLLM runs it.

    python -m calibration.layer_suite --out DIR [--budget-s 180]   # on a CUDA GPU
    python -m calibration.layer_suite --allow-cpu --out DIR         # tests: tiny grid, labelled cpu

Why: the harness times each operator alone; an engine runs them back to back inside a CUDA
graph. A layer = RMSNorm, QKV GEMM, RoPE, KV write (``write_kv``), our paged attention
(``unified_attention``, block 16, random pages), O GEMM, residual, RMSNorm, gate/up GEMM, SiLU x
up, down GEMM, residual; the TP all-reduce is not included (one GPU). Captured in a CUDA graph on
a GPU (L2 flushed before each replay); plain eager wall clock on a CPU under the Triton
interpreter (never GPU data). Shapes: Llama-3.1-8B at TP 1 and the 70B's TP 4 / TP 8 shards; decode
batches 1-256 at contexts 512-8,192, prefill chunks 256-8,192, a few prefixed chunks and mixed
steps. The grid is in priority order, cycling over the shapes, so a run cut short by the budget
keeps a coarse grid of every shape. Writes ``layer.csv`` and a ``layer_suite`` entry in
``meta.json``; resumable like the harness.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibration.manifest import Point, catalog_shapes, shard
from calibration.run_gpu import (
    MAX_FAILURES,
    TIMING,
    Timer,
    append_row,
    cpu_refusal,
    done_ids,
    metadata,
)

FIELDS = ["point_id", "model", "tp", "kind", "n_seqs", "sum_q", "max_ctx", "hidden", "q_heads",
          "kv_heads", "head_dim", "ffn", "block_size", "dtype", "graph", "attn_variant",
          "weight_bytes", "kv_read_bytes", "flops"]
BLOCK = 16
GPU_SHAPES = (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("llama-3.1-70b", 8))
TINY = {"hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 32, "ffn": 96}
CPU_SHAPES = (("tiny", 1), ("tiny", 2))
# (kind, decode batch, decode context, prefill chunk, chunk prefix) in priority tiers.
Spec = tuple[str, int, int, int, int]


@dataclass(frozen=True, slots=True)
class LayerStep:
    """The layer body (a closure over its inputs) and what tests need to check it."""

    run: Callable[[], Any]
    variant: str  # the attention launch config
    inputs: dict[str, Any]  # x, positions, slots, k_cache, v_cache, block_table, rope caches


def specs(cpu: bool) -> list[Spec]:
    if cpu:
        return ([("decode", b, c, 0, 0) for b in (1, 3) for c in (16, 40)]
                + [("prefill", 0, 0, q, 0) for q in (8, 16)]
                + [("prefill", 0, 0, 8, 24), ("mixed", 2, 24, 8, 0)])
    coarse = ([("decode", b, c, 0, 0) for b in (1, 16, 64, 256) for c in (512, 2048, 8192)]
              + [("prefill", 0, 0, q, 0) for q in (256, 2048, 8192)])
    fill = ([("decode", b, c, 0, 0) for b in (2, 4, 8, 32, 128) for c in (512, 2048, 8192)]
            + [("decode", b, c, 0, 0) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)
               for c in (1024, 4096)]
            + [("prefill", 0, 0, q, 0) for q in (512, 1024, 4096)])
    extra = ([("prefill", 0, 0, q, p) for q in (512, 2048) for p in (2048, 6144)]
             + [("mixed", b, 2048, 512, 0) for b in (16, 64)])
    return coarse + fill + extra


def layer_points(cpu: bool) -> list[Point]:
    """Spec-major, shape-minor: every shape gets each spec before the next spec starts."""
    shapes = CPU_SHAPES if cpu else GPU_SHAPES
    pts: list[Point] = []
    for kind, b, c, q, p in specs(cpu):
        q_lens, seq_lens = [q] * (q > 0) + [1] * b, [q + p] * (q > 0) + [c] * b
        for model, tp in shapes:
            pid = f"layer:{model}-tp{tp}:{kind}:{b}x{c}:{q}+{p}"
            pts.append({"point_id": pid, "model": model, "tp": tp, "kind": kind,
                        "q_lens": q_lens, "seq_lens": seq_lens})
    return pts


def shape_of(model: str, tp: int) -> dict[str, int]:
    full = TINY if model == "tiny" else catalog_shapes()[model]
    return shard({k: full[k] for k in TINY}, tp)


def make_weights(torch: Any, s: dict[str, int], dtype: Any, dev: str) -> dict[str, Any]:
    """Random weights in vLLM's [out, in] layout; the gate and up projections merged."""
    h, d, f = s["hidden"], s["head_dim"], s["ffn"]

    def w(o: int, i: int) -> Any:
        return (torch.randn((o, i), device=dev, dtype=dtype) * i ** -0.5)

    return {"norm1": torch.ones(h, device=dev, dtype=dtype), "norm2": torch.ones(h, device=dev, dtype=dtype),
            "qkv": w((s["heads"] + 2 * s["kv_heads"]) * d, h), "o": w(h, s["heads"] * d),
            "gate_up": w(2 * f, h), "down": w(h, f)}


def build_step(torch: Any, s: dict[str, int], w: dict[str, Any], q_lens: list[int],
               seq_lens: list[int], dtype: Any, dev: str, sms: int) -> LayerStep:
    """Inputs (built here, outside any timed region) and the layer body as a closure."""
    import torch.nn.functional as F

    from calibration.kernels import build_metadata, choose_config, unified_attention
    from calibration.kernels.write_kv import write_kv
    from calibration.suites import timing_batch

    h, hq, hkv, d = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"]
    n_tok = sum(q_lens)
    b = timing_batch(torch, q_lens, seq_lens, 1, hkv, d, BLOCK, dtype, dev, paged=True)
    cfg = choose_config(q_lens, seq_lens, hq, hkv, num_sms=sms)
    meta = build_metadata(q_lens, seq_lens, cfg.block_q, dev)
    ql = torch.tensor(q_lens, device=dev)
    seq = torch.repeat_interleave(torch.arange(len(q_lens), device=dev), ql)
    pos = (torch.arange(n_tok, device=dev) - (torch.cumsum(ql, 0) - ql)[seq]
           + (torch.tensor(seq_lens, device=dev) - ql)[seq])
    slots = b.block_table[seq, pos // BLOCK].long() * BLOCK + pos % BLOCK
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(max(seq_lens), device=dev, dtype=torch.float32), inv)
    cos_cache, sin_cache = ang.cos().to(dtype), ang.sin().to(dtype)
    x = torch.randn((n_tok, h), device=dev, dtype=dtype)
    attn = torch.empty((n_tok, hq, d), device=dev, dtype=dtype)

    def rope(t: Any, cos: Any, sin: Any) -> Any:
        t1, t2 = t[..., : d // 2], t[..., d // 2:]
        return torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), dim=-1)

    def step() -> Any:
        y = F.rms_norm(x, (h,), w["norm1"], 1e-5)
        q, k, v = F.linear(y, w["qkv"]).split([hq * d, hkv * d, hkv * d], dim=-1)
        cos, sin = cos_cache[pos].unsqueeze(1), sin_cache[pos].unsqueeze(1)
        q, k = rope(q.view(n_tok, hq, d), cos, sin), rope(k.view(n_tok, hkv, d), cos, sin)
        write_kv(k, v.view(n_tok, hkv, d), b.k_cache, b.v_cache, slots)
        unified_attention(q, b.k_cache, b.v_cache, meta, cfg, block_table=b.block_table, out=attn)
        r = x + F.linear(attn.view(n_tok, hq * d), w["o"])
        g, u = F.linear(F.rms_norm(r, (h,), w["norm2"], 1e-5), w["gate_up"]).chunk(2, dim=-1)
        return r + F.linear(F.silu(g) * u, w["down"])

    return LayerStep(step, f"bq{cfg.block_q}-gp{cfg.group_pad}-tn{cfg.tile_n}-seg{cfg.num_segments}",
                     {"x": x, "pos": pos, "slots": slots, "k_cache": b.k_cache, "v_cache": b.v_cache,
                      "block_table": b.block_table, "cos": cos_cache, "sin": sin_cache})


def in_graph(torch: Any, step: Callable[[], Any]) -> tuple[Callable[[], Any], Any]:
    """Warm up on a side stream (Triton compiles, cuBLAS picks), then capture one CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay, graph


def estimates(s: dict[str, int], q_lens: list[int], seq_lens: list[int], nbytes: int) -> dict[str, float]:
    """Weights and KV bytes a step must read, and its FLOPs (GEMMs + causal attention)."""
    h, hq, hkv, d, f = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["ffn"]
    params = h * (hq + 2 * hkv) * d + hq * d * h + 3 * h * f
    pairs = sum(q * (c - q + (q + 1) / 2) for q, c in zip(q_lens, seq_lens, strict=True))
    return {"weight_bytes": params * nbytes, "kv_read_bytes": 2 * hkv * d * nbytes * sum(seq_lens),
            "flops": 2 * sum(q_lens) * params + 4 * hq * d * pairs}


def measure(p: Point, torch: Any, timer: Timer, ctx: dict[str, Any]) -> dict[str, Any]:
    s = shape_of(p["model"], p["tp"])
    key = (p["model"], p["tp"])
    if key not in ctx["weights"]:
        ctx["weights"][key] = make_weights(torch, s, ctx["dtype"], ctx["dev"])
    body = build_step(torch, s, ctx["weights"][key], p["q_lens"], p["seq_lens"], ctx["dtype"],
                      ctx["dev"], ctx["sms"])
    # `body` holds the graph's input tensors: it must outlive every replay.
    fn, graph = in_graph(torch, body.run) if ctx["dev"] == "cuda" else (body.run, None)
    t, variant = timer(fn), body.variant
    del fn, graph, body
    nbytes = torch.empty((), dtype=ctx["dtype"]).element_size()
    ql, sl = p["q_lens"], p["seq_lens"]
    return {**p, **t, **estimates(s, ql, sl, nbytes), "n_seqs": len(ql), "sum_q": sum(ql),
            "max_ctx": max(sl), "hidden": s["hidden"], "q_heads": s["heads"],
            "kv_heads": s["kv_heads"], "head_dim": s["head_dim"], "ffn": s["ffn"],
            "block_size": BLOCK, "dtype": str(ctx["dtype"]).split(".")[-1],
            "graph": ctx["dev"] == "cuda", "attn_variant": variant}


def run(out: Path, torch: Any, cpu: bool, budget_s: float, reps: int, t0: float) -> dict[str, Any]:
    """Measure the points not yet in ``out/layer.csv`` until the budget is spent."""
    dev = "cpu" if cpu else "cuda"
    ctx: dict[str, Any] = {"dev": dev, "dtype": torch.float16 if cpu else torch.bfloat16, "weights": {},
           "sms": 132 if cpu else torch.cuda.get_device_properties(0).multi_processor_count}
    timer = Timer(torch, cpu, warmup=0 if cpu else 5, reps=reps or (2 if cpu else 20))
    path, pts = out / "layer.csv", layer_points(cpu)
    done, n_new, spent = done_ids(path), 0, False
    failed: list[str] = []
    for p in pts:
        if p["point_id"] in done:
            continue
        if time.monotonic() - t0 > budget_s:
            spent = True
            break
        try:
            row = measure(p, torch, timer, ctx)
        except Exception as e:  # OOM or a config that will not compile: note it, go on
            failed.append(f"{p['point_id']}: {type(e).__name__}: {e}"[:300])
            print(f"point failed: {failed[-1]}", file=sys.stderr)
            if not cpu:
                torch.cuda.empty_cache()
            if len(failed) >= MAX_FAILURES:
                break
            continue
        append_row(path, FIELDS + TIMING, row)
        done.add(p["point_id"])
        n_new += 1
    return {"points": len(pts), "measured_now": n_new, "not_run": sum(p["point_id"] not in done for p in pts),
            "budget_s": budget_s, "budget_spent": spent, "failed": failed,
            "timing": "eager wall clock, Triton interpreter: NOT GPU DATA" if cpu
            else "one CUDA graph per point, CUDA events, L2 flushed, median of reps",
            "wall_s": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    t0 = time.monotonic()
    ap = argparse.ArgumentParser(prog="python -m calibration.layer_suite", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="output dir (the harness's)")
    ap.add_argument("--budget-s", type=float, default=180.0,
                    help="stop starting new points this many seconds after the start")
    ap.add_argument("--allow-cpu", action="store_true", help="tests only: tiny grid, labelled cpu")
    ap.add_argument("--reps", type=int, default=0, help="timed reps per point (default 20 GPU, 2 CPU)")
    args = ap.parse_args(argv)
    import torch

    cpu = not torch.cuda.is_available()
    refused = cpu_refusal(cpu, args.allow_cpu, args.out)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    meta_path = args.out / "meta.json"
    meta = metadata(torch, cpu)
    if meta_path.exists():  # the harness's run in the same folder: add to it, same GPU only
        there = json.loads(meta_path.read_text())
        if there.get("gpu") != meta["gpu"]:
            print(f"{meta_path} is a {there.get('gpu')} run; this is {meta['gpu']}: "
                  "use another --out", file=sys.stderr)
            return 2
        meta = there
    meta["layer_suite"] = status = run(args.out, torch, cpu, args.budget_s, args.reps, t0)
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"layer suite: {status['measured_now']} points measured, {status['not_run']} not run"
          + (" (budget spent)" if status["budget_spent"] else "") + f", {status['wall_s']:.0f}s"
          + (" (CPU wall clock: NOT GPU DATA)" if cpu else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
