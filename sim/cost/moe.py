"""Mixture-of-experts layers timed as MoE (``ModelSpec.num_experts > 0``).

Per MoE layer and step of N tokens, with E routed experts, top-k routing, expert width f::

    distinct experts touched   D(N) = E (1 - (1 - k/E)^N)            (uniform routing)
    routed experts             weights of D(N) experts read once, N k token-expert GEMM rows
                               (one fused kernel: its fixed cost once; every weight-byte term of
                               the GEMM fit, its roofline read and its linear c_w term, x D(N))
    shared experts             a dense gated MLP of width shared x f on every token
    router                     one [N, hidden] x [hidden, E] GEMM
    communication              the layer's all-reduce over TP, counted with the dense layers.
                               EP (``enable_expert_parallel``) with one data-parallel rank gives
                               each GPU E / TP whole experts; its tokens are already replicated
                               by the attention all-reduce and the partial outputs are combined
                               by the same all-reduce (vLLM uses all-to-all kernels only when EP
                               spans data-parallel ranks, ``FusedMoEParallelConfig.use_all2all_kernels``:
                               kvsim has no data parallelism, so there is no all-to-all term)
    TP versus EP               TP: every GPU reads 1 / TP of each of the D(N) touched experts. EP: the
                               step waits for the busiest GPU, which holds more of the touched experts
                               than D(N) / TP at small N (expected maximum over the GPUs, each GPU's
                               count taken as Binomial(E / TP, D(N) / E)): Mixtral, one token, two
                               GPUs: 1.46 experts' weights on the busiest GPU, 1.0 under TP.
                               Rows per GPU: N k / TP in expectation under both.

Decode at small N reads only the experts its tokens touch, which is why a MoE decodes faster
than a dense model of its total size; prefill computes k experts per token. The model's leading
dense layers (DeepSeek-V3's first three) keep the dense MLP. Weights and the KV budget are not
touched here (``sim/memory``). Expert weights use the checkpoint's quantized width (mxfp4,
fp8) when the model has one.

Source of the expert GEMM terms: the GPU's dense GEMM fit (``FitKernels``: Vidur's profiles or a
harness run), each of its terms placed as above; with kernel tables, vLLM's measured fused_moe
instead (``sim/cost/table_basis.py``, ``kernel_moe.py``). Checked against that table on A100-80GB
(Vidur's own GPU): Mixtral at TP 2 / 4, N = 1-256, the fit-based experts are 0.8-1.25x the measured
kernel (tests/test_cost_moe.py). Not modelled: at N >= 2048 the fused kernel runs at ~0.75x the
dense GEMMs' FLOP rate there, so prefill-heavy MoE steps on the fit basis come out ~25 % fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.model.catalog import ModelSpec

Line = tuple[float, float, float, float, float, float]   # (c, c_w, slope, r_w, r_n, r_f), see line_time
LineOf = Callable[[int, int, int, float], Line]          # (k, m, times, weight dtype bytes) -> Line


def line_time(ln: Line, rows: float, weights: float = 1.0) -> float:
    """Seconds of a GEMM line (``FitKernels._line``) over ``rows`` rows that reads its weight matrix
    ``weights`` times (a fused MoE kernel: once per expert touched)::

        c + (weights - 1) c_w + slope rows + max(weights r_w + r_n rows, r_f rows)

    ``c`` is the fit's fixed cost with one read's linear weight term ``c_w`` in it, ``r_w`` the
    roofline's weight read (read once, the sum is the dense GEMM's, bit for bit).
    """
    c, cw, s, rw, rn, rf = ln
    a, b = weights * rw + rn * rows, rf * rows
    return c + (weights - 1.0) * cw + s * rows + (a if a > b else b)


def distinct_experts(tokens: float, experts: int, top_k: int) -> float:
    """Expected distinct experts touched by ``tokens`` tokens each routed to ``top_k`` of ``experts``."""
    if tokens <= 0 or experts <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def expert_bytes_per_weight(model: ModelSpec) -> float:
    q = model.quantization
    return q.bits_per_weight / 8 if q is not None else float(model.dtype_bytes)


def busiest_gpu_experts(tokens: float, experts: int, top_k: int, gpus: int) -> float:
    """Expected touched experts on the busiest of ``gpus`` GPUs holding ``experts / gpus`` whole
    experts each (expert parallelism): E[max] of ``gpus`` Binomial(E / gpus, p) counts, p the chance
    that one expert is touched (the counts taken as independent: within 3 % of a simulation of
    Mixtral's routing on 2 GPUs at N = 1..4). Never below the mean, D(N) / gpus."""
    if tokens <= 0 or experts <= 0:
        return 0.0
    per, p = experts // gpus, 1.0 - (1.0 - top_k / experts) ** tokens
    if gpus <= 1 or per < 1:  # not expert-parallel (or fewer experts than GPUs): the mean
        return distinct_experts(tokens, experts, top_k) / max(1, gpus)
    if p >= 1.0:
        return float(per)
    pmf, cdf, mean_max = (1.0 - p) ** per, 0.0, 0.0
    for j in range(per):            # E[max] = sum_j P(max > j) = sum_j 1 - F(j)^gpus
        cdf += pmf
        mean_max += 1.0 - min(1.0, cdf) ** gpus
        pmf *= (per - j) / (j + 1) * p / (1.0 - p)
    return mean_max


@dataclass(frozen=True, slots=True)
class MoeCost:
    """A MoE model's expert MLPs with every coefficient folded (one instance per cost model)."""

    layers: int                 # MoE layers
    experts: int
    top_k: int
    up: Line                    # one expert's gate+up GEMM, summed over the MoE layers
    down: Line
    shared: tuple[Line, ...]    # shared experts (dense, every token)
    router: Line
    ep: int = 1                 # expert-parallel GPUs (1: experts sharded by TP)

    def time(self, n: int) -> float:
        """Seconds of the step's expert MLPs (all MoE layers) for ``n`` tokens."""
        if n <= 0:
            return 0.0
        if self.ep > 1:
            d = busiest_gpu_experts(n, self.experts, self.top_k, self.ep)
        else:
            d = distinct_experts(n, self.experts, self.top_k)
        rows = n * self.top_k
        t = line_time(self.up, rows, d) + line_time(self.down, rows, d)
        for ln in (*self.shared, self.router):
            t += line_time(ln, n)
        return t


def moe_layers(model: ModelSpec) -> int:
    return max(0, model.layers - model.dense_layers) if model.num_experts else 0


def moe_inactive_params(model: ModelSpec) -> float:
    """Routed-expert parameters a token does not use: (E - k) experts' gated MLPs per MoE layer."""
    f = model.expert_ffn or model.ffn
    return float(moe_layers(model) * (model.num_experts - model.experts_per_token) * 3 * model.hidden * f)


def build_moe(model: ModelSpec, tp: int, expert_parallel: bool, line_of: LineOf) -> MoeCost | None:
    """The folded MoE term, or None for a dense model.

    TP (vLLM's default for MoE) shards every expert's width over the GPUs, and a GPU reads 1 / TP
    of each of D(N) experts; EP gives each GPU E / TP whole experts, and the busiest GPU reads its
    touched experts whole (:func:`busiest_gpu_experts`) and computes N k / TP rows.
    """
    L = moe_layers(model)
    if L == 0:
        return None
    E, k, f, h = model.num_experts, model.experts_per_token, model.expert_ffn or model.ffn, model.hidden
    wb = expert_bytes_per_weight(model)
    ep = tp if expert_parallel and tp > 1 else 1
    f_gpu = f if ep > 1 else max(1, f // tp)
    per = 1.0 / ep  # each GPU gets 1 / ep of the routed rows; its weight reads go by its touched experts

    def scaled(ln: Line) -> Line:
        c, cw, s, rw, rn, rf = ln  # (c holds one read's c_w: each GPU reads its own experts whole)
        return ((c - cw) * per + cw, cw, s * per, rw, rn * per, rf * per)

    up, down = scaled(line_of(h, 2 * f_gpu, L, wb)), scaled(line_of(f_gpu, h, L, wb))
    nb = model.dtype_bytes
    sf = max(1, model.shared_experts * f // tp)
    shared = (line_of(h, 2 * sf, L, nb), line_of(sf, h, L, nb)) if model.shared_experts else ()
    return MoeCost(L, E, k, up, down, shared, line_of(h, E, L, nb), ep)
