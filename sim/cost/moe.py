"""Mixture-of-experts layers timed as MoE (``ModelSpec.num_experts > 0``).

Per MoE layer and step of N tokens, with E routed experts, top-k routing, expert width f::

    distinct experts touched   D(N) = E (1 - (1 - k/E)^N)            (uniform routing)
    routed experts             weights of D(N) experts read once, N k token-expert GEMM rows
                               (one fused kernel: its fixed cost once, weight bytes x D(N))
    shared experts             a dense gated MLP of width shared x f on every token
    router                     one [N, hidden] x [hidden, E] GEMM
    communication              the layer's all-reduce over TP, counted with the dense layers.
                               EP (``enable_expert_parallel``) with one data-parallel rank gives
                               each GPU E / TP whole experts; its tokens are already replicated
                               by the attention all-reduce and the partial outputs are combined
                               by the same all-reduce, so EP changes the GEMM shapes (whole
                               experts), not the bytes, FLOPs or communication per GPU

Decode at small N reads only the experts its tokens touch, which is why a MoE decodes faster
than a dense model of its total size; prefill computes k experts per token. The model's leading
dense layers (DeepSeek-V3's first three) keep the dense MLP. Weights and the KV budget are not
touched here (``sim/memory``). Expert weights use the checkpoint's quantized width (mxfp4,
fp8) when the model has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.model.catalog import ModelSpec

Line = tuple[float, float, float, float, float]          # (c, slope, r_w, r_n, r_f), see calibrated.py
LineOf = Callable[[int, int, int, float], Line]          # (k, m, times, weight dtype bytes) -> Line


def distinct_experts(tokens: float, experts: int, top_k: int) -> float:
    """Expected distinct experts touched by ``tokens`` tokens each routed to ``top_k`` of ``experts``."""
    if tokens <= 0 or experts <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def expert_bytes_per_weight(model: ModelSpec) -> float:
    q = model.quantization
    return q.bits_per_weight / 8 if q is not None else float(model.dtype_bytes)


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

    def time(self, n: int) -> float:
        """Seconds of the step's expert MLPs (all MoE layers) for ``n`` tokens."""
        if n <= 0:
            return 0.0
        d = distinct_experts(n, self.experts, self.top_k)
        rows = n * self.top_k
        t = 0.0
        for c, s, rw, rn, rf in (self.up, self.down):
            a, b = d * rw + rn * rows, rf * rows
            t += c + s * rows + (a if a > b else b)
        for c, s, rw, rn, rf in (*self.shared, self.router):
            a, b = rw + rn * n, rf * n
            t += c + s * n + (a if a > b else b)
        return t


def moe_layers(model: ModelSpec) -> int:
    return max(0, model.layers - model.dense_layers) if model.num_experts else 0


def moe_inactive_params(model: ModelSpec) -> float:
    """Routed-expert parameters a token does not use: (E - k) experts' gated MLPs per MoE layer."""
    f = model.expert_ffn or model.ffn
    return float(moe_layers(model) * (model.num_experts - model.experts_per_token) * 3 * model.hidden * f)


def build_moe(model: ModelSpec, tp: int, expert_parallel: bool, line_of: LineOf) -> MoeCost | None:
    """The folded MoE term, or None for a dense model.

    TP (vLLM's default for MoE) shards every expert's width over the GPUs; EP gives each GPU
    E / TP whole experts, so a GPU reads D(N) / TP experts' full weights and computes N k / TP
    rows: the same bytes and FLOPs per GPU, different communication.
    """
    L = moe_layers(model)
    if L == 0:
        return None
    E, k, f, h = model.num_experts, model.experts_per_token, model.expert_ffn or model.ffn, model.hidden
    wb = expert_bytes_per_weight(model)
    ep = tp if expert_parallel and tp > 1 else 1
    f_gpu = f if ep > 1 else max(1, f // tp)
    per = 1.0 / ep  # each GPU holds 1 / ep of the experts and gets 1 / ep of the routed rows

    def scaled(ln: Line) -> Line:
        c, s, rw, rn, rf = ln
        return (c * per, s * per, rw * per, rn * per, rf * per)

    up, down = scaled(line_of(h, 2 * f_gpu, L, wb)), scaled(line_of(f_gpu, h, L, wb))
    nb = model.dtype_bytes
    sf = max(1, model.shared_experts * f // tp)
    shared = (line_of(h, 2 * sf, L, nb), line_of(sf, h, L, nb)) if model.shared_experts else ()
    return MoeCost(L, E, k, up, down, shared, line_of(h, E, L, nb))
