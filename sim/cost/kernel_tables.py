"""Per-operator kernel times from NVIDIA's published vLLM tables (aiconfigurator-core).

    kt = kernel_tables("h100")              # None for a GPU the package did not measure
    kt.gemm(m=8192, n=4096, k=4096, dtype="bfloat16").seconds
    kt.generation_attention(batch=64, kv_len=2048, heads=32, kv_heads=8, head_dim=128)
    kt.allreduce(16 << 20, tp=4)
    describe("h100")                        # 'aiconfigurator-core 0.12.0, vLLM 0.24.0 tables, h100_sxm'

Every call returns a :class:`Lookup`: seconds per call of one operator on one GPU (one layer),
``extrapolated`` when any coordinate left the measured grid (or a shape was borrowed from a
neighbour), and a note naming the table and vLLM version. Interpolation is in log space on the
achieved rate (sim/cost/kernel_grid.py). Tables load once per process and GPU; a lookup is
pure Python, a few microseconds, so callers may still memoise per token count.
Data: calibration/data/aic/ (README there: columns, units, versions, how to regenerate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from sim.cost import kernel_attention, kernel_moe
from sim.cost.kernel_grid import Curve, Grid3, clamp_low, curve, grid3
from sim.cost.kernel_store import LN_US, Lookup, Store, manifest
from sim.errors import ConfigError

__all__ = ["KernelTables", "Lookup", "describe", "gpus_with_tables", "kernel_tables", "require_tables"]


def gpus_with_tables() -> tuple[str, ...]:
    return tuple(sorted(manifest()["gpus"]))


@cache
def kernel_tables(gpu: str) -> KernelTables | None:
    """The tables of a kvsim GPU key, or None when aiconfigurator-core has none for it."""
    meta = manifest()["gpus"].get(gpu)
    if meta is None:
        return None
    return KernelTables(Store(gpu, meta, str(manifest()["package_version"])))


def require_tables(gpu: str) -> KernelTables:
    kt = kernel_tables(gpu)
    if kt is None:
        raise ConfigError(f"--gpu {gpu}: no aiconfigurator-core kernel tables for this GPU "
                          f"(tables exist for: {', '.join(gpus_with_tables())})")
    return kt


def describe(gpu: str) -> str:
    """Which table a GPU's kernel times come from, for outputs and reports."""
    kt = kernel_tables(gpu)
    if kt is None:
        return f"no aiconfigurator-core {manifest()['package_version']} tables for {gpu}"
    versions = sorted({kt.store.version(t) for t in ("gemm", "context_attention") if kt.store.has(t)})
    return (f"aiconfigurator-core {kt.store.package_version}, vLLM {'/'.join(versions)} tables, "
            f"{kt.store.meta['system']}")


@dataclass(frozen=True, slots=True)
class KernelTables:
    """One GPU's operator times. Sizes are per GPU (heads after TP, n/k of the sharded weight)."""

    store: Store

    @property
    def gpu(self) -> str:
        return self.store.gpu

    def has(self, table: str) -> bool:
        return self.store.has(table)

    def gemm(self, m: int, n: int, k: int, dtype: str = "bfloat16") -> Lookup:
        """(m x k) @ (k x n): m tokens, k input and n output features, weights in `dtype`
        (bfloat16, fp8 = per-tensor W8A8, fp8_block = 128x128 block scales, nvfp4 on B200).

        fp8_block is the lesser of the fp8_block and the per-tensor fp8 tables: the block table
        is flat at a host-bound floor up to m ~ 3000 whatever n and k (85-95 us on H100, 170-250
        on B200, 300-390 on L40S), which is launch overhead, not GPU time; where the GPU work
        dominates the two agree (H100 8192x4096x4096: 288 vs 299 us). `fp8_block_as_measured`
        reads the block table alone.
        """
        if dtype == "fp8_block_as_measured":
            return self._gemm(m, n, k, self.store.pick("gemm", "dtype", "fp8_block"))
        dt = self.store.pick("gemm", "dtype", dtype)
        if dt != "fp8_block" or "fp8" not in self.store.choices("gemm", "dtype"):
            return self._gemm(m, n, k, dt)
        block, fp8 = self._gemm(m, n, k, dt), self._gemm(m, n, k, "fp8")
        if fp8.seconds < block.seconds:
            return Lookup(fp8.seconds, fp8.extrapolated, f"gemm fp8_block as per-tensor fp8 (the block table "
                          f"is host-bound here), {self.store.label('gemm')}")
        return block

    def _gemm(self, m: int, n: int, k: int, dt: str) -> Lookup:
        g: Grid3 = self.store.built(("gemm", dt), lambda: self._gemm_grid(dt))
        lm, em = clamp_low(g.a, math.log(m))
        ln, en = clamp_low(g.b, math.log(n))
        lk, ek = clamp_low(g.c, math.log(k))
        lr, above = g.at(lm, ln, lk)
        seconds = math.exp(math.log(2.0) + lm + ln + lk - lr + LN_US)
        return Lookup(seconds, above or em or en or ek, f"gemm {dt}, {self.store.label('gemm')}")

    def _gemm_grid(self, dtype: str) -> Grid3:
        d = self.store.frame("gemm")
        d = d[d["dtype"] == dtype]
        return grid3(np.log(d["m"].to_numpy(float)), np.log(d["n"].to_numpy(float)),
                     np.log(d["k"].to_numpy(float)), np.log(d["us"].to_numpy(float)))

    def context_attention(self, batch: int, q_len: int, heads: int, kv_heads: int, head_dim: int,
                          prefix: int = 0, kv_dtype: str = "bfloat16", window: int = 0) -> Lookup:
        """Prefill attention: `batch` sequences of `q_len` new tokens after `prefix` cached ones."""
        return kernel_attention.context(self.store, batch, q_len, heads, kv_heads, head_dim, prefix,
                                        kv_dtype, window)

    def generation_attention(self, batch: int, kv_len: int, heads: int, kv_heads: int,
                             head_dim: int, kv_dtype: str = "bfloat16", window: int = 0) -> Lookup:
        """Decode attention: `batch` sequences of one new token over `kv_len` keys each."""
        return kernel_attention.generation(self.store, batch, kv_len, heads, kv_heads, head_dim,
                                           kv_dtype, window)

    def mla_context(self, batch: int, q_len: int, heads: int, prefix: int = 0,
                    kv_dtype: str = "bfloat16", gemm_dtype: str = "bfloat16") -> Lookup:
        """DeepSeek-V3 MLA attention module (projections + attention), prefill; heads per GPU."""
        return kernel_attention.mla(self.store, "context", batch, q_len, heads, prefix, kv_dtype, gemm_dtype)

    def mla_generation(self, batch: int, kv_len: int, heads: int, kv_dtype: str = "bfloat16",
                       gemm_dtype: str = "bfloat16") -> Lookup:
        return kernel_attention.mla(self.store, "generation", batch, kv_len, heads, 0, kv_dtype, gemm_dtype)

    def moe(self, tokens: int, hidden: int, inter: int, experts: int, topk: int, tp: int = 1,
            ep: int = 1, dtype: str = "bfloat16", distribution: str = "balanced") -> Lookup:
        """Expert GEMMs of one MoE layer on one GPU (`inter` and `experts` of the whole model)."""
        return kernel_moe.moe(self.store, tokens, hidden, inter, experts, topk, tp, ep, dtype, distribution)

    def moe_a2a(self, tokens: int, hidden: int, topk: int, experts: int, ep: int,
                phase: str = "dispatch", backend: str = "deepep_ll") -> Lookup:
        return kernel_moe.moe_a2a(self.store, tokens, hidden, topk, experts, ep, phase, backend)

    def allreduce(self, nbytes: int, tp: int, graph: bool = True) -> Lookup:
        """vLLM's tensor-parallel all-reduce of `nbytes` (bf16) over `tp` GPUs; graph=False: eager."""
        if tp <= 1:
            return Lookup(0.0, False, "tp 1: no all-reduce")
        mode = "graph" if graph else "eager"
        return self._comm("allreduce", {"mode": mode}, "tp", nbytes, tp, f"all-reduce ({mode})")

    def nccl(self, op: str, nbytes: int, gpus: int, dtype: str = "half") -> Lookup:
        """An NCCL collective (all_reduce, all_gather, reduce_scatter, alltoall) of `nbytes`."""
        if gpus <= 1:
            return Lookup(0.0, False, f"1 GPU: no {op}")
        fixed = {"op": self.store.pick("nccl", "op", op), "dtype": self.store.pick("nccl", "dtype", dtype)}
        return self._comm("nccl", fixed, "gpus", nbytes, gpus, f"NCCL {op}")

    def alltoall(self, nbytes: int, gpus: int) -> Lookup:
        return self.nccl("alltoall", nbytes, gpus)

    def _comm(self, table: str, fixed: dict[str, str], col: str, nbytes: int, n: int, what: str) -> Lookup:
        """1-D in log bytes; an unmeasured GPU count borrows the nearest, scaled by ring traffic."""
        counts: tuple[int, ...] = self.store.built(
            (table, "counts", tuple(fixed.items())),
            lambda: tuple(sorted(int(v) for v in self._rows(table, fixed)[col].unique())))
        near = n if n in counts else min(counts, key=lambda c: (abs(math.log(c / n)), c))
        c: Curve = self.store.built((table, tuple(fixed.items()), near),
                                    lambda: self._comm_curve(table, fixed, col, near))
        lb, low = clamp_low(c.xs, math.log(max(nbytes, 1)))
        lr, above = c.at(lb)
        seconds = math.exp(lb - lr + LN_US) * ((n - 1) / n) / ((near - 1) / near)
        note = f"{what}, {self.store.label(table)}" + ("" if near == n else f"; {near} GPUs scaled")
        return Lookup(seconds, low or above or near != n, note)

    def _rows(self, table: str, fixed: dict[str, str]) -> pd.DataFrame:
        d = self.store.frame(table)
        for k, v in fixed.items():
            d = d[d[k] == v]
        return d

    def _comm_curve(self, table: str, fixed: dict[str, str], col: str, n: int) -> Curve:
        d = self._rows(table, fixed)
        d = d[d[col] == n]
        b = d["bytes"].to_numpy(float)
        return curve(np.log(b), np.log(d["us"].to_numpy(float)), np.log(b))
