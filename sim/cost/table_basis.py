"""GPU kernel time of a step from NVIDIA's published vLLM operator tables (``kernel_tables``).

Where aiconfigurator-core measured the GPU (h100, h200, b200, l40s, a100-80gb), the calibrated
model's kernel terms come from here instead of Vidur's 2024 operator fits::

    dense(N)  = L [gemm(N, QKV) + gemm(N, O)] + L_dense [gemm(N, up) + gemm(N, down)]
                + L_moe [moe(N) + gemm(N, router) + shared experts] + 2 L allreduce(N x hidden)
    head(S)   = gemm(S, vocab / TP)                         (the LM head, on sequences)
    attention = a0 + a_seq S + a_row N + a_kv (ctx) + a_fl (pairs + decode ctx) + a_pg pages

Every GEMM is read at the step's exact token count (memoised per count by the caller). The
attention tables are indexed by (batch, query length) and (batch, KV length); the step's batch
is ragged, so their times are fitted once per model shape to the linear form above (non-negative
least squares on relative error over a grid of decode and prefill shapes; ``attention_fit_mape``
says how well the form holds). The page term is kept from the paged-kernel fit (the tables were
measured at one block size), so a slab and other block sizes still differ by it.
"""

from __future__ import annotations

import itertools

import numpy as np

from sim.cost.kernel_store import Lookup
from sim.cost.kernel_tables import KernelTables
from sim.cost.moe import moe_layers
from sim.model.catalog import ModelSpec

DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
PREFILL = ((1, 128), (1, 512), (1, 2048), (1, 8192), (2, 1024), (4, 512), (8, 256), (1, 16384))
PREFIXES = (0, 1024, 4096)
Attn = tuple[float, float, float, float, float, float]   # (a0, a_seq, a_row, a_kv, a_fl, a_pg), all layers


def gemm_dtype(model: ModelSpec) -> str:
    """The GEMM table a checkpoint's linear layers run on (int4 weights: the bf16 table, an
    upper bound at large batches; the floor still reads their true bytes)."""
    q = model.quantization
    return "fp8" if q is not None and q.method == "fp8" else "bfloat16"


def moe_dtype(model: ModelSpec) -> str:
    q = model.quantization
    if q is None:
        return "bfloat16"
    return {"fp8": "fp8", "mxfp4": "w4a16_mxfp4", "awq": "int4_wo", "gptq": "int4_wo"}.get(q.method, "bfloat16")


class TableBasis:
    """One (model, GPU, TP)'s kernel times from the tables; ``notes`` lists what was extrapolated."""

    __slots__ = ("_ep", "_gdt", "_kt", "_mdt", "model", "notes", "tp")

    def __init__(self, kt: KernelTables, model: ModelSpec, tp: int, expert_parallel: bool = False) -> None:
        self._kt, self.model, self.tp = kt, model, tp
        self._ep = tp if expert_parallel and tp > 1 else 1
        self._gdt, self._mdt = gemm_dtype(model), moe_dtype(model)
        self.notes: set[str] = set()

    def _t(self, lookup: Lookup) -> float:
        if lookup.extrapolated:
            self.notes.add(lookup.note)
        return lookup.seconds

    def _gemm(self, m: int, n: int, k: int, dtype: str | None = None) -> float:
        return self._t(self._kt.gemm(m, max(1, n), max(1, k), dtype or self._gdt))

    def dense(self, n: int) -> float:
        """Seconds of the step's token-count kernels for ``n`` tokens (0 tokens: nothing runs)."""
        if n <= 0:
            return 0.0
        m, tp = self.model, self.tp
        L, hq, hkv, d = m.layers, max(1, m.heads // tp), m.kv_heads_per_gpu(tp), m.head_dim
        t = 0.0
        if not (m.is_mla and self._kt.has("mla_generation")):  # MLA tables time the whole module
            t += L * (self._gemm(n, (hq + 2 * hkv) * d, m.hidden) + self._gemm(n, m.hidden, hq * d))
        dense_layers = L - moe_layers(m)
        if dense_layers:
            ffn = m.ffn // tp
            up = (2 if m.gated_mlp else 1) * ffn
            t += dense_layers * (self._gemm(n, up, m.hidden) + self._gemm(n, m.hidden, ffn))
        if m.is_moe:
            t += moe_layers(m) * self._moe(n)
        if tp > 1:
            t += 2 * L * self._t(self._kt.allreduce(n * m.hidden * m.dtype_bytes, tp))
        return t

    def _moe(self, n: int) -> float:
        m, tp, ep = self.model, self.tp, self._ep
        f = m.expert_ffn or m.ffn
        t = self._t(self._moe_lookup(n, f, tp // ep, ep))
        t += self._gemm(n, m.num_experts, m.hidden, "bfloat16")  # the router
        if m.shared_experts:
            sf = max(1, m.shared_experts * f // tp)
            t += self._gemm(n, 2 * sf, m.hidden) + self._gemm(n, m.hidden, sf)
        return t

    def token_grid(self) -> np.ndarray:
        """The token counts the GEMM table measured (1, 2, ..., 17, 32, 33, 48, ..., 32,768), with
        every power of two up to 65,536: between them a step's dense time is interpolated."""
        m = self._kt.store.frame("gemm")["m"].to_numpy(np.int64)
        return np.unique(np.r_[m, 2 ** np.arange(17)]).astype(np.int64)

    def _moe_lookup(self, n: int, f: int, tp: int, ep: int) -> Lookup:
        """The expert GEMMs from the table of the checkpoint's dtype. An FP8 checkpoint may be
        per-tensor or 128x128-block scaled (DeepSeek's): both tables are read and a shape the
        table measured wins over one scaled from a neighbour, then the faster (vLLM picks its
        kernel by checkpoint; the per-tensor table is 4-9x slower than the block one where both
        hold DeepSeek-V3's shape)."""
        m, have = self.model, self._kt.store.choices("moe", "dtype")
        want = ("fp8_block", "fp8") if self._mdt == "fp8" else (self._mdt,)
        dts = [d for d in want if d in have]
        if not dts:  # e.g. A100's table has bf16 experts only: an upper bound, said so
            self.notes.add(f"moe {self._mdt} experts timed as bfloat16 ({self._kt.store.label('moe')})")
            dts = ["bfloat16"]
        got = [self._kt.moe(n, m.hidden, f, m.num_experts, m.experts_per_token, tp=tp, ep=ep, dtype=d) for d in dts]
        return min(got, key=lambda lk: (lk.extrapolated, lk.seconds))

    def head(self, seqs: int) -> float:
        """Seconds of the LM head over ``seqs`` sequences."""
        if seqs <= 0:
            return 0.0
        return self._gemm(seqs, self.model.vocab // self.tp, self.model.hidden, "bfloat16")

    def attention(self, page_coef: float) -> tuple[Attn, float]:
        """The attention's folded coefficients (all layers) and the fit's MAPE over its grid.
        ``page_coef``: seconds per KV page read (all layers), kept from the paged-kernel fit."""
        rows, times = self._attention_samples()
        x = np.array(rows, dtype=float)
        y = np.array(times, dtype=float)
        pages = x[:, 5]
        target = np.maximum(y - page_coef * pages, 0.5 * y)
        a = x[:, :5] / target[:, None]
        coef = nnls(a, np.ones(len(y)))
        pred = x[:, :5] @ coef + page_coef * pages
        mape = float(np.mean(np.abs(pred / y - 1.0)))
        c0, cs, cr, ck, cf = (float(v) for v in coef)
        return (c0, cs, cr, ck, cf, page_coef), mape

    def _attention_samples(self) -> tuple[list[tuple[float, ...]], list[float]]:
        """(1, seqs, rows, ctx, pairs + decode ctx, pages at block 16) and all-layer seconds."""
        m, tp, kt = self.model, self.tp, self._kt
        L, hq, hkv, d = m.layers, max(1, m.heads // tp), m.kv_heads_per_gpu(tp), m.head_dim
        kvd = "fp8" if m.kv_dtype_bytes == 1 else "bfloat16"
        mla = m.is_mla and kt.has("mla_generation")
        cap = m.max_model_len
        rows: list[tuple[float, ...]] = []
        times: list[float] = []
        for b, c in itertools.product(DECODE_BATCHES, CONTEXTS):
            if c > cap:
                continue
            lk = (kt.mla_generation(b, c, hq, kvd) if mla else
                  kt.generation_attention(b, c, hq, hkv, d, kvd))
            rows.append((1.0, b, b, b * c, b * c, b * -(-c // 16)))
            times.append(L * self._t(lk))
        for (b, q), p in itertools.product(PREFILL, PREFIXES):
            if p + q > cap:
                continue
            lk = (kt.mla_context(b, q, hq, p, kvd) if mla else
                  kt.context_attention(b, q, hq, hkv, d, p, kvd))
            ctx, pairs = b * (p + q), b * q * (p + (q + 1) / 2)
            rows.append((1.0, b, b * q, ctx, pairs, b * -(-(p + q) // 16)))
            times.append(L * self._t(lk))
        return rows, times


def nnls(a: np.ndarray, b: np.ndarray, iters: int = 100) -> np.ndarray:
    """min |a x - b| subject to x >= 0 (Lawson and Hanson's active set). Here rather than
    scipy.optimize.nnls: importing scipy.optimize costs 0.5-0.9 s, once per process, more than a
    whole replay of the 70B benchmark; a handful of columns needs no more than this."""
    n = a.shape[1]
    x, free = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(iters):
        w = a.T @ (b - a @ x)
        if free.all() or (w[~free] <= 1e-12 * max(1.0, float(np.abs(w).max()))).all():
            break
        free[np.argmax(np.where(free, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
            if (z[free] > 0).all():
                x = z
                break
            neg = free & (z <= 0)
            alpha = float(np.min(x[neg] / (x[neg] - z[neg])))
            x = x + alpha * (z - x)
            free &= x > 1e-15
            x[~free] = 0.0
    return x
