"""The GPU-kernel half of the calibrated model: a step's kernel time as three folded pieces.

    tokens(N)  every kernel whose time depends only on the step's token count: the dense GEMMs, MoE
               experts and router, the TP all-reduce, elementwise ops and the KV write
    head(S)    the LM head over the S sequences that sample
    attn       attention, folded over all layers: a0 + a_seq S + a_row N + a_kv (ctx)
               + a_fl (pairs + decode ctx) + a_pg pages (``slab``: the same for a contiguous KV)

Two bases give them, and :func:`kernel_basis` picks one per GPU:

- :class:`TableKernels` (the default where the GPU has them): NVIDIA's vLLM operator tables
  (aiconfigurator-core, :mod:`sim.cost.kernel_tables`, :mod:`sim.cost.table_basis`). ``tokens`` is
  read from the tables at the token counts they measured (and every power of two to 65,536) and
  interpolated linearly between them, so a step costs no lookup (within 1 % of a direct lookup:
  tests/test_kernel_basis.py);
- :class:`FitKernels`: the operator fits of ``sources.py`` (Vidur's 2024 profiles, or your own
  harness run), the labelled fallback for a GPU the tables lack (l4, mi300x, a100-40gb) and the
  basis wherever a harness fit was named (``--calibration``).

Elementwise ops and the KV write come from the operator fits (or bandwidth) under both.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from sim.cost.kernel_tables import describe, kernel_tables
from sim.cost.moe import Line, MoeCost, build_moe, line_time, moe_layers
from sim.cost.roofline import allreduce_time
from sim.cost.sources import Term
from sim.cost.table_basis import TableBasis
from sim.model.catalog import GpuSpec, ModelSpec

ETA_BW, ETA_C = 0.9, 0.8  # roofline fallback for a term no file covers (H200 measurement, specs.md)
GEMM_KEYS = ("c0", "c_w", "c_act", "c_fl", "c_roof")
Attn = tuple[float, float, float, float, float, float]


class Kernels(Protocol):
    """What the calibrated model reads of a kernel basis (module docstring)."""

    attn: Attn
    slab: Attn

    def tokens(self, n: int) -> float: ...

    def head(self, seqs: int) -> float: ...


def fold_attention(model: ModelSpec, tp: int, c: dict[str, float]) -> Attn:
    """An attention fit's per-layer coefficients folded with the model's shapes, all layers."""
    m, L, nb = model, model.layers, model.dtype_bytes
    hq, hkv, d = max(1, m.heads // tp), m.kv_heads_per_gpu(tp), m.head_dim
    kvb = m.layer_bytes_per_token(tp)  # K and V at the KV dtype; MLA: the latent, whole on every rank
    return (L * c.get("c0", 0.0), L * c.get("c_seq", 0.0), L * c.get("c_row", 0.0) * hq * d * 2 * nb,
            L * c.get("c_kv", 0.0) * kvb, L * c.get("c_fl", 0.0) * 4 * hq * d, L * c.get("c_pg", 0.0) * hkv)


def elementwise(model: ModelSpec, gpu: GpuSpec, tp: int, elem: Term | None) -> tuple[float, float]:
    """(fixed, per token) seconds of the elementwise ops and the KV write, all layers."""
    m, L, nb = model, model.layers, model.dtype_bytes
    kvw = m.layer_bytes_per_token(tp) * 2 / (ETA_BW * gpu.bandwidth_bps)  # read new K/V + write to cache
    if elem is None:
        return 0.0, L * (10 * m.hidden * nb / (ETA_BW * gpu.bandwidth_bps) + kvw)
    e = elem.coef
    return L * e.get("c0", 0.0), L * (e.get("c_h", 0.0) * m.hidden * nb + e.get("c_f", 0.0) * (m.ffn // tp) * nb + kvw)


class FitKernels:
    """Kernel time from operator fits (GEMM, attention, all-reduce lines of ``sources.py``)."""

    __slots__ = ("_analytic_ar", "_e0", "_e1", "_gemms", "_gpu", "_lm", "_model", "_tp", "attn", "moe", "slab")

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int, terms: dict[str, Term | None],
                 expert_parallel: bool = False) -> None:
        self._model, self._gpu, self._tp = model, gpu, tp
        m, L = model, model.layers
        hq, hkv, d, ffn = max(1, m.heads // tp), m.kv_heads_per_gpu(tp), m.head_dim, m.ffn // tp
        paged, slab = terms["attention"], terms["attention_slab"]
        assert paged is not None and slab is not None
        self.attn, self.slab = fold_attention(m, tp, paged.coef), fold_attention(m, tp, slab.coef)
        up, dense_mlp = (2 if m.gated_mlp else 1) * ffn, L - moe_layers(m)
        shapes = ((m.hidden, (hq + 2 * hkv) * d, L), (hq * d, m.hidden, L), (m.hidden, up, dense_mlp),
                  (ffn, m.hidden, dense_mlp))
        gemm = terms["gemm"]
        self._gemms = tuple(self._line(gemm, k, mm, n) for k, mm, n in shapes if n)
        self._lm = self._line(gemm, m.hidden, m.vocab // tp, 1)
        self.moe: MoeCost | None = build_moe(m, tp, expert_parallel,  # the expert MLPs (None: dense)
                                             lambda k, mm, n, wb: self._line(gemm, k, mm, n, wb))
        self._e0, self._e1 = elementwise(m, gpu, tp, terms["elementwise"])
        ar = terms["allreduce"]
        if tp > 1 and ar is not None:
            self._e0 += 2 * L * ar.coef.get("c0", 0.0)
            self._e1 += 2 * L * ar.coef.get("c_b", 0.0) * m.hidden * m.dtype_bytes
        self._analytic_ar = tp > 1 and ar is None

    def _line(self, gemm: Term | None, k: int, mm: int, times: int, weight_bytes: float | None = None) -> Line:
        """(c, c_w, slope, r_w, r_n, r_f), all x ``times`` (:func:`sim.cost.moe.line_time`): the fit's
        fixed cost with one read's linear weight term, that term alone, the activation and FLOP
        terms, and the roofline's weight, activation and FLOP reads. ``weight_bytes`` per
        weight (a quantized expert); activations stay in the model dtype."""
        nb, bw, fl = self._model.dtype_bytes, self._gpu.bandwidth_bps, self._gpu.flops
        w, act, flops = k * mm * (nb if weight_bytes is None else weight_bytes), (k + mm) * nb, 2.0 * k * mm
        if gemm is None:
            return (0.0, 0.0, 0.0, times * w / (ETA_BW * bw), times * act / (ETA_BW * bw), times * flops / (ETA_C * fl))
        c = [gemm.coef.get(x, 0.0) for x in GEMM_KEYS]
        return (times * (c[0] + c[1] * w), times * c[1] * w, times * (c[2] * act + c[3] * flops),
                times * c[4] * w / bw, times * c[4] * act / bw, times * c[4] * flops / fl)

    def tokens(self, n: int) -> float:
        t = self._e0 + self._e1 * n + sum(line_time(g, n) for g in self._gemms)
        if self.moe is not None:
            t += self.moe.time(n)
        if self._analytic_ar:
            t += allreduce_time(self._model, self._gpu, self._tp, n)
        return t

    def head(self, seqs: int) -> float:
        return line_time(self._lm, seqs)


class TableKernels:
    """Kernel time from NVIDIA's vLLM operator tables; ``label`` names them, ``fit_mape`` is the
    attention form's error over its grid, ``notes`` what left the measured grid."""

    __slots__ = ("_basis", "_e0", "_e1", "_xs", "_ys", "attn", "fit_mape", "label", "notes", "slab")

    def __init__(self, basis: TableBasis, gpu: GpuSpec, page_coef: float, elem: Term | None) -> None:
        m, tp = basis.model, basis.tp
        self._basis = basis
        self._e0, self._e1 = elementwise(m, gpu, tp, elem)
        self._xs = basis.token_grid()
        self._ys = np.array([basis.dense(int(n)) for n in self._xs])
        self.attn, self.fit_mape = basis.attention(page_coef)
        self.slab = (*self.attn[:5], 0.0)
        self.notes = tuple(sorted(basis.notes))
        self.label = describe(gpu.key)

    def tokens(self, n: int) -> float:
        """Elementwise + the tables' token-count kernels; 0 tokens: the one-token time (the weights
        read once: the step's token-independent part, which the stack's ``eta`` multiplies)."""
        x, xs, ys = (n if n > 1 else 1), self._xs, self._ys
        if x <= xs[-1]:
            t = float(np.interp(x, xs, ys))
        else:  # past 65,536 tokens: the last octave's slope (extrapolated)
            t = float(ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (x - xs[-1]))
        return self._e0 + self._e1 * n + t

    def head(self, seqs: int) -> float:
        """The LM head (0 sequences: one's, the token-independent part; the caller memoises)."""
        return self._basis.head(seqs if seqs > 1 else 1)


def kernel_basis(model: ModelSpec, gpu: GpuSpec, tp: int, terms: dict[str, Term | None], *,
                 tables: bool, expert_parallel: bool = False) -> FitKernels | TableKernels:
    """The tables where asked for (a stack fitted over them, no harness fit named) and this GPU has
    them; else the operator fits."""
    kt = kernel_tables(gpu.key) if tables else None
    if kt is None:
        return FitKernels(model, gpu, tp, terms, expert_parallel)
    paged = terms["attention"]
    page = fold_attention(model, tp, paged.coef)[5] if paged is not None else 0.0
    return TableKernels(TableBasis(kt, model, tp, expert_parallel), gpu, page, terms["elementwise"])
