"""Fused-MoE and DeepEP all-to-all times from the tables.

The MoE table holds the shapes of the models NVIDIA profiled (Mixtral, DeepSeek-V3, Qwen3-MoE,
gpt-oss, Llama-4, ...), each at several (tp, ep) and token counts. A measured shape is
interpolated over log tokens on the achieved FLOP rate (work = 6 x tokens x topk x hidden x
inter / (tp x ep): up+gate and down projections of the experts this GPU holds). Any other shape
is timed from the nearest measured one of the same dtype, scaled by the ratio of a per-GPU
roofline (FLOPs at datasheet peak vs the bytes of the experts the batch touches in expectation at
datasheet bandwidth) between the two shapes, and says extrapolated.
"""

from __future__ import annotations

import math

import numpy as np

from sim.cost.kernel_grid import Curve, clamp_low, curve
from sim.cost.kernel_store import LN_US, Lookup, Store
from sim.model.catalog import gpu_catalog

SHAPE = ("hidden", "inter", "experts", "topk", "tp", "ep")
WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int4_wo": 0.5, "nvfp4": 0.5625,
                "w4a16_mxfp4": 0.53125, "w4a8_mxfp4_mxfp8": 0.53125}
FP8_MATH = ("fp8", "fp8_block", "w4a8_mxfp4_mxfp8", "nvfp4")


def moe_flops(tokens: float, s: dict[str, int]) -> float:
    return 6.0 * tokens * s["topk"] * s["hidden"] * s["inter"] / (s["tp"] * s["ep"])


def roofline(gpu: str, dtype: str, tokens: float, s: dict[str, int]) -> float:
    """max(compute, weight read) seconds of one MoE layer on one GPU (only for ratios)."""
    spec = gpu_catalog()[gpu]
    peak = spec.flops * (2.0 if dtype in FP8_MATH else 1.0)
    touched = s["experts"] / s["ep"] * (1.0 - (1.0 - s["topk"] / s["experts"]) ** tokens)
    weight = touched * 3.0 * s["hidden"] * s["inter"] / s["tp"] * WEIGHT_BYTES.get(dtype, 2.0)
    return max(moe_flops(tokens, s) / peak, weight / spec.bandwidth_bps)


def _shapes(store: Store, dtype: str, distribution: str) -> list[tuple[int, ...]]:
    def make() -> list[tuple[int, ...]]:
        df = store.frame("moe")
        sub = df[(df["dtype"] == dtype) & (df["distribution"] == distribution)]
        return sorted({tuple(int(v) for v in row) for row in sub[list(SHAPE)].itertuples(index=False)})
    return list(store.built(("moe", "shapes", dtype, distribution), make))


def _curve(store: Store, dtype: str, distribution: str, shape: tuple[int, ...]) -> Curve:
    def make() -> Curve:
        df = store.frame("moe")
        m = (df["dtype"] == dtype) & (df["distribution"] == distribution)
        for col, v in zip(SHAPE, shape, strict=True):
            m &= df[col] == v
        d = df[m]
        t = d["tokens"].to_numpy(float)
        s = dict(zip(SHAPE, shape, strict=True))
        return curve(np.log(t), np.log(d["us"].to_numpy(float)), np.log(moe_flops(1.0, s) * t))
    c: Curve = store.built(("moe", dtype, distribution, shape), make)
    return c


def _nearest(have: list[tuple[int, ...]], want: dict[str, int]) -> tuple[int, ...]:
    def dist(h: tuple[int, ...]) -> tuple[bool, float, tuple[int, ...]]:
        s = dict(zip(SHAPE, h, strict=True))
        d = (abs(math.log(s["hidden"] / want["hidden"]))
             + abs(math.log(s["inter"] / s["tp"] / (want["inter"] / want["tp"])))
             + abs(math.log(s["experts"] / s["ep"] / (want["experts"] / want["ep"])))
             + abs(math.log(s["topk"] / want["topk"])))
        return ((s["tp"], s["ep"]) != (want["tp"], want["ep"]), d, h)
    return min(have, key=dist)


def moe(store: Store, tokens: int, hidden: int, inter: int, experts: int, topk: int, tp: int = 1,
        ep: int = 1, dtype: str = "bfloat16", distribution: str = "balanced") -> Lookup:
    """One MoE layer's expert GEMMs on one GPU for `tokens` tokens (router, all-to-all apart)."""
    dt = store.pick("moe", "dtype", dtype)
    dists = store.choices("moe", "distribution")  # A100 has only the power-law ones
    dist = distribution if distribution in dists else ("power_law_1.01" if "power_law_1.01" in dists else dists[0])
    want = {"hidden": hidden, "inter": inter, "experts": experts, "topk": topk, "tp": tp, "ep": ep}
    key = tuple(want[c] for c in SHAPE)
    have = _shapes(store, dt, dist)
    ref = key if key in have else _nearest(have, want)
    c = _curve(store, dt, dist, ref)
    s_ref = dict(zip(SHAPE, ref, strict=True))
    lt, low = clamp_low(c.xs, math.log(tokens))
    lr, above = c.at(lt)
    t_ref = math.exp(math.log(moe_flops(math.exp(lt), s_ref)) - lr + LN_US)
    note = f"moe {dt} {dist}, {store.label('moe')}" + ("" if dist == distribution else f" ({distribution} not measured)")
    if ref == key:
        return Lookup(t_ref, low or above or dist != distribution, note)
    scale = roofline(store.gpu, dt, tokens, want) / roofline(store.gpu, dt, math.exp(lt), s_ref)
    shape = "/".join(str(v) for v in ref)
    return Lookup(t_ref * scale, True, note + f"; shape hidden/inter/experts/topk/tp/ep {shape} scaled by roofline")


def moe_a2a(store: Store, tokens: int, hidden: int, topk: int, experts: int, ep: int,
            phase: str = "dispatch", backend: str = "deepep_ll") -> Lookup:
    """DeepEP dispatch or combine of `tokens` tokens on one GPU (one node), as measured in vLLM."""
    table = "moe_a2a"
    b = store.pick(table, "backend", backend)
    ph = store.pick(table, "phase", phase)
    df = store.frame(table)

    def shapes() -> list[tuple[int, int, int, int]]:
        sub = df[(df["backend"] == b) & (df["phase"] == ph)]
        return sorted({(int(r.ep), int(r.hidden), int(r.experts), int(r.topk)) for r in sub.itertuples()})
    have: list[tuple[int, int, int, int]] = store.built((table, b, ph), shapes)
    want = (ep, hidden, experts, topk)
    ref = want if want in have else min(have, key=lambda h: (
        sum(abs(math.log(x / y)) for x, y in zip(h, want, strict=True)), h))

    def make() -> Curve:
        d = df[(df["backend"] == b) & (df["phase"] == ph) & (df["ep"] == ref[0]) & (df["hidden"] == ref[1])
               & (df["experts"] == ref[2]) & (df["topk"] == ref[3])]
        t = d["tokens"].to_numpy(float)
        return curve(np.log(t), np.log(d["us"].to_numpy(float)), np.log(t * ref[1] * ref[3]))
    c: Curve = store.built((table, b, ph, ref), make)
    lt, low = clamp_low(c.xs, math.log(tokens))
    lr, above = c.at(lt)
    lw = lt + math.log(hidden * topk)
    note = f"all-to-all {b} {ph}, {store.label(table)}"
    if ref != want:
        note += "; shape ep/hidden/experts/topk " + "/".join(map(str, ref)) + " scaled by bytes"
    return Lookup(math.exp(lw - lr + LN_US), low or above or ref != want, note)
