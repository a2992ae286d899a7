"""``--cost-model calibrated`` (the default): GPU kernels from operator fits, plus a serving stack.

Per step (kernel-and-calibration.md §6.2, with the stack of :mod:`sim.cost.stack`)::

    t_gpu = L (t_attn + t_gemm(QKV, O, up, down) + t_elementwise + t_kv_write)
            + t_gemm(LM head, rows = sequences) + 2 L t_allreduce(TP)
    t     = max(eta[tp] t_gpu, L launch_s) + cpu_s[tp] + per_seq_s seqs
            + [prefill] (prefill_s + prefill_n2_s prefill_tokens^2) + t_swap

The up projection is 2 x ffn wide for a gated MLP (``ModelSpec.gated_mlp``), ffn otherwise.
Each GPU term takes the best calibration file (:mod:`sim.cost.sources`); the model's ``basis``
says whether everything was measured for this GPU and TP (``fitted``) or some term was scaled
from another GPU or TP (``extrapolated``, with how), and carries the fit's error band.

``step_time`` runs once per simulated step: every coefficient is folded with the model's
shapes here, and the token-count-dependent dense part is memoised per token count.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sim.cost.batch import CostBasis, StepBatch
from sim.cost.roofline import allreduce_time
from sim.cost.sources import (
    Source,
    Term,
    allreduce_term,
    committed_calibrations,
    copy_term,
    pick,
    read_calibration,
    resolve,
)
from sim.cost.stack import ServingStack, resolve_stack
from sim.errors import ConfigError
from sim.model.catalog import GpuSpec, ModelSpec

NO_DATA = ("no calibration data committed yet; run calibration/run_gpu.py on a GPU, "
           "or use --cost-model roofline")
ETA_BW, ETA_C = 0.9, 0.8  # roofline fallback for a term no file covers (H200 measurement, specs.md)
GEMM_KEYS = ("c0", "c_w", "c_act", "c_fl", "c_roof")


class CalibratedCost:
    """A StepCostModel with every coefficient folded with the model's shapes."""

    __slots__ = (
        "_attn",
        "_basis",
        "_cpu",
        "_d2h",
        "_dense",
        "_eta",
        "_floor",
        "_fn",
        "_fs",
        "_gemms",
        "_h2d",
        "_idle",
        "_lm",
        "_per_seq",
        "_pf",
        "_pf2",
        "_slab",
        "gpu",
        "labels",
        "model",
        "stack",
        "tp",
    )

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int, terms: dict[str, Term | None],
                 stack: ServingStack, copy: dict[str, float] | None, basis: CostBasis,
                 labels: tuple[tuple[str, str], ...]) -> None:
        self.model, self.gpu, self.tp, self.stack, self.labels, self._basis = model, gpu, tp, stack, labels, basis
        m, L, nb = model, model.layers, model.dtype_bytes
        hq, hkv, d, ffn = max(1, m.heads // tp), m.kv_heads_per_gpu(tp), m.head_dim, m.ffn // tp
        paged, slab = terms["attention"], terms["attention_slab"]
        assert paged is not None and slab is not None

        def fold(c: dict[str, float]) -> tuple[float, ...]:
            return (L * c.get("c0", 0.0), L * c.get("c_seq", 0.0), L * c.get("c_row", 0.0) * hq * d * 2 * nb,
                    L * c.get("c_kv", 0.0) * 2 * hkv * d * nb, L * c.get("c_fl", 0.0) * 4 * hq * d,
                    L * c.get("c_pg", 0.0) * hkv)

        self._attn, self._slab = fold(paged.coef), fold(slab.coef)
        up = (2 if m.gated_mlp else 1) * ffn
        shapes = ((m.hidden, (hq + 2 * hkv) * d), (hq * d, m.hidden), (m.hidden, up), (ffn, m.hidden))
        gemm = terms["gemm"]
        self._gemms = tuple(self._gemm_line(gemm, k, mm, L) for k, mm in shapes)
        self._lm = self._gemm_line(gemm, m.hidden, m.vocab // tp, 1)
        elem = terms["elementwise"]
        kvw = 2 * hkv * d * nb * 2 / (ETA_BW * gpu.bandwidth_bps)  # read new K/V + write to cache
        if elem is not None:
            e = elem.coef
            dense0, dense1 = L * e.get("c0", 0.0), L * (e.get("c_h", 0.0) * m.hidden * nb + e.get("c_f", 0.0) * ffn * nb + kvw)
        else:
            dense0, dense1 = 0.0, L * (10 * m.hidden * nb / (ETA_BW * gpu.bandwidth_bps) + kvw)
        ar = terms["allreduce"]
        if tp > 1 and ar is not None:
            c = ar.coef
            dense0 += 2 * L * c.get("c0", 0.0)
            dense1 += 2 * L * c.get("c_b", 0.0) * m.hidden * nb
        self._dense = (dense0, dense1, tp > 1 and ar is None)
        self._cpu, self._eta = stack.at_tp(tp)
        self._floor = L * stack.launch_s
        self._per_seq, self._pf, self._pf2 = stack.per_seq_s, stack.prefill_s, stack.prefill_n2_s
        self._idle = self._cpu
        self._h2d = 1.0 / ((copy or {}).get("h2d_gbps", gpu.pcie_gbps) * 1e9)
        self._d2h = 1.0 / ((copy or {}).get("d2h_gbps", gpu.pcie_gbps) * 1e9)
        self._fn: dict[int, float] = {}
        self._fs: dict[int, float] = {}

    def _gemm_line(self, gemm: Term | None, k: int, mm: int, times: int) -> tuple[float, ...]:
        """(c, slope, r_w, r_n, r_f): time(n) = times x (c + slope n + max(r_w + r_n n, r_f n))."""
        nb, bw, fl = self.model.dtype_bytes, self.gpu.bandwidth_bps, self.gpu.flops
        w, act, flops = k * mm * nb, (k + mm) * nb, 2.0 * k * mm
        if gemm is None:
            return (0.0, 0.0, times * w / (ETA_BW * bw), times * act / (ETA_BW * bw), times * flops / (ETA_C * fl))
        c = [gemm.coef.get(x, 0.0) for x in GEMM_KEYS]
        return (times * (c[0] + c[1] * w), times * (c[2] * act + c[3] * flops),
                times * c[4] * w / bw, times * c[4] * act / bw, times * c[4] * flops / fl)

    @staticmethod
    def _line(g: tuple[float, ...], n: int) -> float:
        c, s, rw, rn, rf = g
        a, b = rw + rn * n, rf * n
        return c + s * n + (a if a > b else b)

    def _n_part(self, n: int) -> float:
        """Everything that depends only on the step's token count (dense layers, all-reduce)."""
        d0, d1, analytic_ar = self._dense
        t = d0 + d1 * n + sum(self._line(g, n) for g in self._gemms)
        if analytic_ar:
            t += allreduce_time(self.model, self.gpu, self.tp, n)
        self._fn[n] = t
        return t

    def _s_part(self, seqs: int) -> float:
        t = self._line(self._lm, seqs)
        self._fs[seqs] = t
        return t

    @property
    def name(self) -> str:
        return f"calibrated ({self.gpu.key}, tp={self.tp}, {self.stack.name} stack; {self._basis.basis})"

    @property
    def basis(self) -> CostBasis:
        return self._basis

    def gpu_time(self, b: StepBatch) -> float:
        """Kernel time of the step on one GPU (attention, dense, LM head, all-reduce), no stack."""
        (pt, ps, pairs, pctx, dec, dctx, pages, bsz, _, _, _) = b
        n, seqs = pt + dec, ps + dec
        if n == 0:
            return 0.0
        fn = self._fn.get(n)
        if fn is None:
            fn = self._n_part(n)
        fs = self._fs.get(seqs)
        if fs is None:
            fs = self._s_part(seqs)
        a0, a_seq, a_row, a_kv, a_fl, a_pg = self._attn if bsz > 0 else self._slab
        return (a0 + a_seq * seqs + a_row * n + a_kv * (dctx + pctx) + a_fl * (pairs + dctx)
                + (a_pg * pages if bsz > 0 else 0.0) + fn + fs)

    def step_time(self, batch: StepBatch) -> float:
        pt, ps, dec, so, si = batch[0], batch[1], batch[4], batch[8], batch[9]
        if pt + dec == 0:
            return self._idle + (self._swap(batch) if so or si else 0.0)
        t = self._eta * self.gpu_time(batch)
        if t < self._floor:
            t = self._floor
        t += self._cpu + self._per_seq * (ps + dec)
        if pt:
            t += self._pf + self._pf2 * pt * pt
        if so or si:
            t += self._swap(batch)
        return t

    def decode_step_time(self, seqs: int, block_size: int) -> Callable[[int, int], float]:
        """:meth:`step_time` of a decode-only step of ``seqs`` sequences as a function of its
        context tokens and pages (fast-forward, :mod:`sim.cost.bulk`): the terms that do not
        depend on them folded once, the rest the same float operations in the same order."""
        fn = self._fn.get(seqs)
        if fn is None:
            fn = self._n_part(seqs)
        fs = self._fs.get(seqs)
        if fs is None:
            fs = self._s_part(seqs)
        a0, a_seq, a_row, a_kv, a_fl, a_pg = self._attn if block_size > 0 else self._slab
        head = a0 + a_seq * seqs + a_row * seqs  # gpu_time's first three terms (n == seqs)
        eta, floor, tail = self._eta, self._floor, self._cpu + self._per_seq * seqs
        if block_size <= 0:
            a_pg = 0.0  # gpu_time adds 0.0 for a contiguous KV (0.0 * pages == 0.0)

        def time(ctx: int, pages: int) -> float:
            t = eta * (head + a_kv * ctx + a_fl * ctx + a_pg * pages + fn + fs)
            return (floor if t < floor else t) + tail

        return time

    def _swap(self, b: StepBatch) -> float:
        return b.block_bytes * (b.swap_in_blocks * self._h2d + b.swap_out_blocks * self._d2h)

    def parts(self, b: StepBatch) -> dict[str, float]:
        """The step's time split into named parts (seconds); they add up to ``step_time``."""
        gpu = self.gpu_time(b)
        busy = self._eta * gpu
        launch = max(0.0, self._floor - busy) if b.num_tokens else 0.0
        pf = (self._pf + self._pf2 * b.prefill_tokens ** 2) if b.prefill_tokens else 0.0
        out = {"gpu_kernels": gpu, "stack_kernel_overhead": busy - gpu, "launch_bound_wait": launch,
               "cpu_step": self._cpu, "cpu_per_seq": self._per_seq * b.num_seqs if b.num_tokens else 0.0,
               "prefill_overhead": pf, "swap": self._swap(b)}
        return out


def _labels(terms: dict[str, Term | None], tp: int, copy_label: str, stack: ServingStack) -> tuple[tuple[str, str], ...]:
    out = [("attention", terms["attention"].label if terms["attention"] else "?"),
           ("dense", t.label if (t := terms["gemm"]) else "roofline (uncalibrated)"),
           ("elementwise", t.label if (t := terms["elementwise"]) else "roofline (uncalibrated)")]
    if tp > 1:
        out.append(("all-reduce", t.label if (t := terms["allreduce"]) else "analytic (datasheet link)"))
    out += [("swap", copy_label), ("kv-write", "roofline (uncalibrated)"),
            ("stack", f"{stack.name}: {stack.source or 'committed profile'}")]
    return tuple(out)


def _basis(gpu: GpuSpec, tp: int, terms: dict[str, Term | None], stack: ServingStack,
           labels: tuple[tuple[str, str], ...], bands: dict[str, tuple[float, float]]) -> CostBasis:
    key = ["attention", "gemm"] + (["allreduce"] if tp > 1 else [])
    own = all((t := terms[k]) is not None and t.own for k in key)
    stack_tp = tp in stack.fitted_tps
    basis = "fitted" if own and stack_tp else "extrapolated"
    how = [f"{n}: {lab}" for n, lab in labels if n not in ("swap", "kv-write")]
    if not stack_tp:
        how.append(f"{stack.name} stack fitted at TP {', '.join(map(str, stack.fitted_tps))}; "
                   f"TP {tp} interpolated in log2(TP)")
    return CostBasis(basis, "; ".join(how), bands["fitted" if basis == "fitted" else "extrapolated"])


def build_calibrated(model: ModelSpec, gpu: GpuSpec, tp: int, sources: list[Source],
                     stack: ServingStack | None = None, prefer: Source | None = None) -> CalibratedCost:
    """``prefer``: a calibration file the user named; its terms win over the committed ones."""
    if not sources:
        raise ConfigError(NO_DATA)
    stack = stack or resolve_stack("vllm")
    att_src = pick(sources, "attention", gpu, prefer)
    paged = resolve(att_src, "attention", gpu, "paged")
    if paged is None:
        raise ConfigError(f"calibrated: no attention fit for any GPU in {[str(s.path) for s in sources]}; "
                          "run calibration/run_gpu.py on a GPU, or use --cost-model roofline")
    slab = resolve(att_src, "attention", gpu, "contiguous") or Term(
        {**paged.coef, "c_pg": 0.0}, paged.label + " (paged fit, page term dropped)", paged.own)
    terms: dict[str, Term | None] = {
        "attention": paged, "attention_slab": slab,
        "gemm": resolve(pick(sources, "gemm", gpu, prefer), "gemm", gpu),
        "elementwise": resolve(pick(sources, "elementwise", gpu, prefer), "elementwise", gpu),
        "allreduce": allreduce_term(sources, gpu, tp, prefer)}
    copy, copy_label = copy_term(sources, gpu, prefer)
    labels = _labels(terms, tp, copy_label, stack)
    b = stack.band
    bands = {"fitted": (b.optimistic, b.pessimistic),
             "extrapolated": (b.optimistic_extrapolated, b.pessimistic_extrapolated)}
    return CalibratedCost(model, gpu, tp, terms, stack, copy, _basis(gpu, tp, terms, stack, labels, bands), labels)


def load_calibrated_cost(model: ModelSpec, gpu: GpuSpec, tp: int, calibration: Path | None,
                         stack: str = "vllm") -> CalibratedCost:
    """Entry point used by ``sim.cost.build_cost_model("calibrated", ...)``.

    With ``calibration`` (a harness fit), its terms come first and the committed public fits
    fill in what it lacks (dense, all-reduce, elementwise for the GPUs Vidur profiled).
    """
    committed = committed_calibrations()
    if calibration is None:
        return build_calibrated(model, gpu, tp, committed, resolve_stack(stack))
    p = Path(calibration)
    if p.is_dir():
        p = p / "fit.yaml"
    if not p.exists():
        raise ConfigError(f"--calibration {calibration}: no such file (expected a fit YAML or a "
                          "directory with fit.yaml)")
    own = read_calibration(p)
    return build_calibrated(model, gpu, tp, [own, *[s for s in committed if s.gpu != own.gpu]],
                            resolve_stack(stack), prefer=own)
