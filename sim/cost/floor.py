"""The physics floor of one step: no engine runs a step faster than its GPU can move or compute it.

Per GPU, for a step of ``n`` tokens from ``s`` sequences (``StepBatch``)::

    memory  = [ dense weights (attention, dense MLPs, shared experts; the router whole on every GPU)
              + E[distinct routed experts] x one expert's weights       (MoE: E (1 - (1 - k/E)^n) per layer)
              + LM head (when a sequence samples)
              + new K/V written (n tokens, every layer)
              + K/V read (context tokens of the prefill chunks and decodes, full and MLA layers) ]
              / (FLOOR_BW x HBM bandwidth)
    compute = [ 2 x active params x n (dense layers + top-k experts) + 2 x LM head x s ] / peak of the weight dtype
              + causal attention (QK and PV over the pairs of prefill chunks and the context of decodes)
              / peak of the KV dtype, all at FLOOR_C
    floor   = max(memory, compute)

Every count is a lower bound of what a kernel must do, so a faster step is a modelling error:

- the input embedding is a gather of ``n`` rows, not counted; tied embeddings are read once as the head;
- sliding-window and chunked-local layers' KV reads and attention FLOPs are not counted (their reads
  depend on each sequence's length, which a ``StepBatch`` does not carry);
- MLA attention counts the latent KV (``kv_lora_rank + qk_rope_head_dim``, whole on every TP rank) and
  the cheaper of its two forms per pair: QK over ``head_dim`` plus PV over ``head_dim - qk_rope_head_dim``
  (DeepSeek's ``v_head_dim`` = ``qk_nope_head_dim``); the absorbed decode form does more;
- under TP every GPU reads 1 / TP of each touched expert, under EP D(n) / TP whole experts in
  expectation (the busiest GPU reads more; the cost model, not the floor, times that);
- weights are the catalog's ``params_b`` (a checkpoint's vision tower, if loaded, is counted as dense).

Compute dtype of a GEMM by weight format, as vLLM's kernels run it: bf16/fp16 at the BF16 peak; ``fp8``
as W8A8 at the FP8 peak where the GPU has one (A100: Marlin W8A16, BF16 peak); ``awq``/``gptq`` int4/int8
as W4A16/W8A16 (Marlin) at the BF16 peak; ``mxfp4`` at the FP8 peak on GPUs with FP4 tensor cores
(Blackwell's MXFP4 x MXFP8 MoE kernels), else W4A16 (Triton/Marlin upcast) at the BF16 peak. Attention
runs at the FP8 peak with a 1-byte KV cache on a GPU with FP8 (FlashAttention-3 FP8), else BF16.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost.batch import StepBatch
from sim.cost.moe import distinct_experts, expert_bytes_per_weight, moe_layers
from sim.model.catalog import GpuSpec, ModelSpec

FLOOR_BW = 0.92   # of the datasheet HBM bandwidth: above what tuned copy and GEMV kernels sustain (issue 48)
FLOOR_C = 0.80    # of the dense tensor-core peak: above what an engine's GEMMs sustain (issue 48)
_ATTN_KINDS = ("full", "mla")


def gemm_peak(gpu: GpuSpec, method: str | None) -> float:
    """Dense FLOP/s of a GEMM whose weights are stored as ``method`` (None: the model dtype)."""
    bf16 = gpu.bf16_tflops * 1e12
    if method == "fp8" and gpu.fp8_tflops > 0:
        return gpu.fp8_tflops * 1e12
    if method == "mxfp4" and gpu.fp4_tflops > 0 and gpu.fp8_tflops > 0:
        return gpu.fp8_tflops * 1e12
    return bf16


def attention_peak(gpu: GpuSpec, kv_dtype_bytes: int) -> float:
    if kv_dtype_bytes == 1 and gpu.fp8_tflops > 0:
        return gpu.fp8_tflops * 1e12
    return gpu.bf16_tflops * 1e12


@dataclass(frozen=True, slots=True)
class PhysicsFloor:
    """One (model, GPU, TP)'s floor, every count folded per GPU into seconds at FLOOR_BW / FLOOR_C.

    Attributes:
        dense_s: memory seconds of the weights every step reads whole.
        expert_s: memory seconds of one routed expert's weights (all MoE layers, this GPU's share).
        experts, top_k: routed experts and experts per token (0, 0: a dense model).
        write_s: memory seconds per token of the new K/V written.
        token_s: compute seconds per token of the dense and top-k expert GEMMs.
        head_s: memory seconds of the LM head; head_flop_s: its compute seconds per sequence.
        kv_s: memory seconds per context token read (full and MLA layers).
        pair_s: compute seconds per causal query-key pair (full and MLA layers).
    """

    dense_s: float
    expert_s: float
    experts: int
    top_k: int
    write_s: float
    token_s: float
    head_s: float
    head_flop_s: float
    kv_s: float
    pair_s: float

    def tokens(self, n: int) -> tuple[float, float]:
        """(memory, compute) seconds of the part of a step that depends on its token count only."""
        if n <= 0:
            return 0.0, 0.0
        mem = self.dense_s + distinct_experts(n, self.experts, self.top_k) * self.expert_s + self.write_s * n
        return mem, self.token_s * n

    def seqs(self, s: int) -> tuple[float, float]:
        """(memory, compute) seconds of the LM head for ``s`` sampling sequences."""
        return (self.head_s, self.head_flop_s * s) if s > 0 else (0.0, 0.0)

    def memory_compute(self, b: StepBatch) -> tuple[float, float]:
        n, s = b.prefill_tokens + b.num_decode_seqs, b.num_prefill_seqs + b.num_decode_seqs
        if n <= 0:
            return 0.0, 0.0
        tm, tc = self.tokens(n)
        sm, sc = self.seqs(s)
        ctx = b.decode_context_tokens + b.prefill_context_tokens
        return (tm + sm + self.kv_s * ctx,
                tc + sc + self.pair_s * (b.prefill_attn_pairs + b.decode_context_tokens))

    def step(self, b: StepBatch) -> float:
        """No step of ``b`` takes less (seconds)."""
        mem, comp = self.memory_compute(b)
        return mem if mem > comp else comp


def build_floor(model: ModelSpec, gpu: GpuSpec, tp: int = 1) -> PhysicsFloor:
    m, nb, q = model, model.dtype_bytes, model.quantization
    bw = FLOOR_BW * gpu.bandwidth_bps
    table = m.vocab * m.hidden                                   # one embedding table (= the LM head)
    tables = table * (1 if m.tie_word_embeddings else 2)
    lm, E, k = moe_layers(m), m.num_experts, m.experts_per_token
    expert = 3.0 * m.hidden * (m.expert_ffn or m.ffn) * lm       # one gated expert, all MoE layers
    routed, router = E * expert, float(lm * E * m.hidden)
    ebw = expert_bytes_per_weight(m) if lm else 0.0
    dense_p = max(0.0, m.params_b * 1e9 - tables - routed)       # attention, dense MLPs, shared, router
    dense_b = max(0.0, m.weight_bytes - tables * nb - routed * ebw)
    dense_b = (dense_b - router * nb) / tp + router * nb         # the router is replicated, not sharded
    dense_p = (dense_p - router) / tp + router
    dense_method = q.method if q is not None and (q.quantized_params_b is None
                                                  or q.quantized_params_b * 1e9 > 1.02 * routed) else None
    expert_method = q.method if q is not None else None
    token_flops = 2.0 * dense_p / gemm_peak(gpu, dense_method) + 2.0 * k * expert / tp / gemm_peak(gpu, expert_method)
    return PhysicsFloor(
        dense_s=dense_b / bw, expert_s=expert * ebw / tp / bw, experts=E if lm else 0, top_k=k if lm else 0,
        write_s=m.kv_bytes_per_token(tp) / bw, token_s=token_flops / FLOOR_C,
        head_s=table * nb / tp / bw, head_flop_s=2.0 * table / tp / (FLOOR_C * gpu.bf16_tflops * 1e12),
        kv_s=_attention_layers(m) * m.layer_bytes_per_token(tp) / bw,
        pair_s=_attention_layers(m) * _pair_flops(m, tp) / (FLOOR_C * attention_peak(gpu, m.kv_dtype_bytes)))


def _attention_layers(m: ModelSpec) -> int:
    """Layers that attend to the whole context (full or MLA)."""
    return sum(1 for kind in m.layer_kinds() if kind in _ATTN_KINDS)


def _pair_flops(m: ModelSpec, tp: int) -> float:
    """FLOPs of one query-key pair in one such layer on one GPU: QK (2 d) + PV (2 d_v) per head."""
    d_v = m.head_dim - (m.qk_rope_head_dim or 0) if m.is_mla else m.head_dim
    return 2.0 * (m.head_dim + d_v) * m.heads / tp


def held_attention(coef: tuple[float, ...], eta_attn: float, floor: PhysicsFloor,
                   *, paged: bool) -> tuple[float, ...]:
    """A cost model's attention coefficients ``(c0, per seq, per row, per context token, per pair,
    per page)`` as its stack multiplies them by ``eta_attn``: the context-token and pair ones raised
    so that ``eta_attn`` x each is at least the floor's KV read and FLOPs; no negative term; no
    page term on a contiguous KV (``paged`` False)."""
    e = eta_attn if eta_attn > 1e-12 else 1e-12
    c0, seq, row, kv, pair, page = (x if x > 0.0 else 0.0 for x in coef)
    return c0, seq, row, max(kv, floor.kv_s / e), max(pair, floor.pair_s / e), page if paged else 0.0
