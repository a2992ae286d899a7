"""``--cost-model calibrated`` (the default): GPU kernels from operator fits, plus a serving stack.

Per step (kernel-and-calibration.md §6.2, with the stack of :mod:`sim.cost.stack`)::

    t_gpu = L (t_attn + t_gemm(QKV, O) + t_elementwise + t_kv_write) + L_dense t_gemm(up, down)
            + t_moe (sim/cost/moe.py) + t_gemm(LM head, rows = sequences) + 2 L t_allreduce(TP)
    t     = eta[tp] t_fixed + eta_tok t_dense(N) + eta_attn t_attn(KV, pairs), each part held at its
            floor [max L launch_s when launch-bound] + cpu_s[tp] + per_seq_s seqs
            + [prefill] (prefill_s + prefill_n2_s sum_i chunk_i^2) + t_swap
    t     = t + sched (async scheduling off)  |  max(t, sched) (on: the CPU plans step k+1 while k runs)

Held at its floor (:mod:`sim.cost.floor`): the token-count part is never below its weights touched
nor its FLOPs, the LM head's likewise, eta_attn x the KV and pair coefficients never below the KV
read and attention FLOPs; so no step beats max(memory, compute), whatever the multipliers.
The up projection is 2 x ffn wide for a gated MLP (``ModelSpec.gated_mlp``), ffn otherwise.
Each GPU term takes the best calibration file (:mod:`sim.cost.sources`); ``basis`` says whether
all was measured for this GPU and TP (``fitted``) or scaled from another (``extrapolated``).
"""

from __future__ import annotations

from collections.abc import Callable

from sim.cost.batch import CostBasis, StepBatch
from sim.cost.bulk import DecodeTerms
from sim.cost.floor import build_floor, held_attention
from sim.cost.kernels import Kernels, kernel_basis
from sim.cost.labels import basis_of_terms, labels_of
from sim.cost.sources import Source, Term, allreduce_term, copy_term, pick, resolve
from sim.cost.stack import DEFAULT_STACK, ServingStack, resolve_stack
from sim.errors import ConfigError
from sim.model.catalog import GpuSpec, ModelSpec

NO_DATA = "no calibration data committed yet; run calibration/run_gpu.py on a GPU, or use --cost-model roofline"
PREFILLS_KEPT = 1 << 12  # prefill-only step times kept, then forgotten at once: ~1 MB (conv trace: 2,339 prompts)


class CalibratedCost:
    """A StepCostModel with every coefficient folded with the model's shapes."""

    __slots__ = ("_a0e", "_async", "_attn", "_basis", "_battn", "_bn", "_bs", "_bslab", "_cpu", "_d2h",
                 "_eta", "_eta_attn", "_eta_tok", "_fixed", "_floor", "_fn", "_fs", "_h2d",
                 "_per_seq", "_pf", "_pf2", "_phys", "_prefills", "_sched", "_slab", "gpu", "kernels", "labels", "model",
                 "stack", "tp")

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int, kernels: Kernels,
                 stack: ServingStack, copy: dict[str, float] | None, basis: CostBasis,
                 labels: tuple[tuple[str, str], ...], *, enforce_eager: bool = False,
                 async_scheduling: bool = True) -> None:
        self.model, self.gpu, self.tp, self.stack, self.labels, self._basis = model, gpu, tp, stack, labels, basis
        self.kernels = kernels
        self._attn, self._slab = kernels.attn, kernels.slab
        self._cpu, self._eta = stack.at_tp(tp)
        self._floor = model.layers * stack.launch_floor(enforce_eager)
        self._async, self._sched = async_scheduling, (stack.sched_s, stack.sched_per_seq_s)
        self._per_seq, self._pf, self._pf2 = stack.per_seq_s, stack.prefill_s, stack.prefill_n2_s
        self._h2d, self._d2h = (1.0 / ((copy or {}).get(f"{way}_gbps", gpu.pcie_gbps) * 1e9) for way in ("h2d", "d2h"))
        self._eta_tok = stack.eta_tok or self._eta
        self._eta_attn = stack.eta_attn or self._eta_tok
        self._phys = ph = build_floor(model, gpu, tp)
        memo: Callable[[], dict[int, float]] = dict  # token count and LM head parts: kernels, as run
        self._fn, self._bn, self._fs, self._bs = memo(), memo(), memo(), memo()
        self._prefills: dict[StepBatch, float] = {}
        self._n_part(0), self._s_part(0)
        self._fixed = self._fn[0] + self._fs[0] + self._attn[0]  # token-independent kernel time
        self._a0e = self._eta * self._attn[0]
        self._battn, self._bslab = (held_attention(c, self._eta_attn, ph, paged=p)
                                    for c, p in ((self._attn, True), (self._slab, False)))

    def _n_part(self, n: int) -> float:
        """Everything that depends only on the step's token count (dense layers, all-reduce), memoised
        as kernel time (``_fn``) and as the stack runs it, held at its floor (``_bn``, returned)."""
        t = self._fn[n] = self.kernels.tokens(n)
        f0 = self._fn.get(0, t)  # as the stack runs it: never below its weights touched nor its FLOPs
        b = self._bn[n] = max(self._eta * f0 + self._eta_tok * (t - f0), *self._phys.tokens(n))
        return b

    def _s_part(self, seqs: int) -> float:
        """The LM head of ``seqs`` sequences (memoised like :meth:`_n_part`)."""
        t = self._fs[seqs] = self.kernels.head(seqs)
        f0 = self._fs.get(0, t)
        b = self._bs[seqs] = max(self._eta * f0 + self._eta_tok * (t - f0), *self._phys.seqs(seqs))
        return b

    @property
    def name(self) -> str:
        return f"calibrated ({self.gpu.key}, tp={self.tp}, {self.stack.name} stack; {self._basis.basis})"

    @property
    def basis(self) -> CostBasis:
        return self._basis

    def kernel_parts(self, b: StepBatch) -> tuple[float, float, float]:
        """(token-independent, dense token-dependent, attention token-dependent) kernel time."""
        (pt, ps, pairs, pctx, dec, dctx, pages, bsz, _, _, _) = b
        n, seqs = pt + dec, ps + dec
        if n == 0:
            return 0.0, 0.0, 0.0
        for memo, part, key in ((self._fn, self._n_part, n), (self._fs, self._s_part, seqs)):
            if key not in memo:
                part(key)
        fn, fs = self._fn[n], self._fs[seqs]
        a0, a_seq, a_row, a_kv, a_fl, a_pg = self._attn if bsz > 0 else self._slab
        attn = (a_seq * seqs + a_row * n + a_kv * (dctx + pctx) + a_fl * (pairs + dctx)
                + (a_pg * pages if bsz > 0 else 0.0))
        return self._fixed, fn + fs + a0 - self._fixed, attn

    def stack_parts(self, b: StepBatch) -> tuple[float, float, float, float]:
        """(fixed, dense, attention, held): ``busy_time`` = eta fixed + eta_tok dense + eta_attn attention
        + held; a part held at its floor is in ``held``, which no stack coefficient moves (for stack fits)."""
        f, d, a = self.kernel_parts(b)
        held, n, seqs = 0.0, b.num_tokens, b.num_seqs
        for raw, kept, key in ((self._fn, self._bn, n), (self._fs, self._bs, seqs)):
            r0, r = raw[0], raw[key]
            if n and kept[key] > self._eta * r0 + self._eta_tok * (r - r0):
                f, d, held = f - r0, d - (r - r0), held + kept[key]
        raw_a, kept_a = (self._attn, self._battn) if b.block_size > 0 else (self._slab, self._bslab)
        for i, x in ((3, b.decode_context_tokens + b.prefill_context_tokens),
                     (4, b.prefill_attn_pairs + b.decode_context_tokens)):
            if n and kept_a[i] > raw_a[i]:
                a, held = a - raw_a[i] * x, held + self._eta_attn * kept_a[i] * x
        return f, d, a, held

    def gpu_time(self, b: StepBatch) -> float:
        """Kernel time of the step on one GPU (attention, dense, LM head, all-reduce), no stack."""
        return sum(self.kernel_parts(b))

    def roofline_floor(self, b: StepBatch) -> float:
        """The step's physics floor (:mod:`sim.cost.floor`); ``busy_time`` holds each part above it."""
        return self._phys.step(b)

    def busy_time(self, b: StepBatch) -> float:
        """The stack's kernel time of the step, each multiplied part held at its floor, no CPU terms."""
        (pt, ps, pairs, pctx, dec, dctx, pages, bsz, _, _, _) = b
        n, seqs = pt + dec, ps + dec
        if n == 0:
            return 0.0
        bn = self._bn.get(n)
        if bn is None:
            bn = self._n_part(n)
        bs = self._bs.get(seqs)
        if bs is None:
            bs = self._s_part(seqs)
        _, a_seq, a_row, a_kv, a_fl, a_pg = self._battn if bsz > 0 else self._bslab
        t = bn + bs + self._a0e + self._eta_attn * (
            a_seq * seqs + a_row * n + a_kv * (dctx + pctx) + a_fl * (pairs + dctx) + a_pg * pages)
        return 0.0 if t < 0.0 else t  # DecodeTerms' roof, 0: the floor is in the parts

    def step_time(self, batch: StepBatch) -> float:
        """A step's time; a prefill-only step (its prompt alone decides it; prompts repeat) is looked up."""
        if batch[4] or not batch[0]:
            return self._step_time(batch)
        t = self._prefills.get(batch)
        if t is None:
            if len(self._prefills) >= PREFILLS_KEPT:
                self._prefills.clear()
            t = self._prefills[batch] = self._step_time(batch)
        return t

    def _step_time(self, batch: StepBatch) -> float:
        pt, ps, dec, so, si = batch[0], batch[1], batch[4], batch[8], batch[9]
        if pt + dec == 0:
            return self._cpu + (self._swap(batch) if so or si else 0.0)
        t = self.busy_time(batch)
        if t < self._floor:
            t = self._floor
        seqs = ps + dec
        t += self._cpu + self._per_seq * seqs
        if pt:
            t += self._pf + self._pf2 * _sq_chunks(batch)
        if so or si:
            t += self._swap(batch)
        sched = self._sched[0] + self._sched[1] * seqs
        if not self._async:
            return t + sched
        return t if t > sched else sched

    def decode_terms(self, seqs: int, block_size: int) -> DecodeTerms:
        """:meth:`step_time` of ``seqs`` decodes folded but for their context tokens and pages
        (:mod:`sim.cost.bulk`), in the order :meth:`busy_time` and :meth:`step_time` use them."""
        bn, bs = self._bn.get(seqs) or self._n_part(seqs), self._bs.get(seqs) or self._s_part(seqs)
        _, a_seq, a_row, a_kv, a_fl, a_pg = self._battn if block_size > 0 else self._bslab
        return DecodeTerms(  # head: busy_time's attention, first two terms (n == seqs)
            dense=bn + bs + self._a0e, eta_attn=self._eta_attn, head=a_seq * seqs + a_row * seqs,
            a_kv=a_kv, a_fl=a_fl, a_pg=a_pg, roof=0.0, floor=self._floor, tail=self._cpu + self._per_seq * seqs,
            sched=self._sched[0] + self._sched[1] * seqs, is_async=self._async)

    def _swap(self, b: StepBatch) -> float:
        return b.block_bytes * (b.swap_in_blocks * self._h2d + b.swap_out_blocks * self._d2h)

    def parts(self, b: StepBatch) -> dict[str, float]:
        """The step's time split into named parts (seconds); they add up to ``step_time``."""
        f, d, a = self.kernel_parts(b)
        gpu, stacked, busy = f + d + a, self._eta * f + self._eta_tok * d + self._eta_attn * a, self.busy_time(b)
        launch = max(0.0, self._floor - busy) if b.num_tokens else 0.0
        pf = (self._pf + self._pf2 * _sq_chunks(b)) if b.prefill_tokens else 0.0
        out = {"gpu_kernels": gpu, "stack_kernel_overhead": stacked - gpu, "physics_floor": busy - stacked,
               "launch_bound_wait": launch, "cpu_step": self._cpu,
               "cpu_per_seq": self._per_seq * b.num_seqs if b.num_tokens else 0.0,
               "prefill_overhead": pf, "swap": self._swap(b)}
        rest = sum(out.values())
        sched = self._sched[0] + self._sched[1] * b.num_seqs if b.num_tokens else 0.0
        out["scheduler_cpu"] = max(0.0, sched - rest) if self._async else sched
        return out


def _sq_chunks(b: StepBatch) -> float:
    """Sum over the step's prefill sequences of chunk^2 (attention work, per sequence: never the
    square of the step's total), from the causal pairs: 2 pairs - tokens = sum c (c + 2 prefix)."""
    return max(0.0, 2.0 * b.prefill_attn_pairs - b.prefill_tokens)


def build_calibrated(model: ModelSpec, gpu: GpuSpec, tp: int, sources: list[Source],
                     stack: ServingStack | None = None, prefer: Source | None = None, *,
                     expert_parallel: bool = False, **options: bool) -> CalibratedCost:
    """``prefer``: a calibration file the user named; its terms win over the committed ones and over
    the kernel tables. ``options``: ``enforce_eager``, ``async_scheduling``."""
    if not sources:
        raise ConfigError(NO_DATA)
    stack = stack or resolve_stack(DEFAULT_STACK)
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
    tables = stack.kernels == "tables" and prefer is None  # a stack keeps the basis it was fitted over
    kernels = kernel_basis(model, gpu, tp, terms, tables=tables, expert_parallel=expert_parallel)
    copy, copy_label = copy_term(sources, gpu, prefer)
    labels = labels_of(terms, tp, copy_label, stack, kernels)
    b = stack.band
    bands = {"fitted": (b.optimistic, b.pessimistic),
             "extrapolated": (b.optimistic_extrapolated, b.pessimistic_extrapolated)}
    basis = basis_of_terms(model, gpu, tp, terms, stack, labels, bands, kernels)
    return CalibratedCost(model, gpu, tp, kernels, stack, copy, basis, labels, **options)
