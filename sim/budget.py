"""KV budget: how many blocks fit, computed the way vLLM 0.33 does (vllm-v1-semantics.md s8).

::

    requested    = ceil(gpu_memory x gpu_memory_utilization)            per GPU
    non_kv       = weights/TP + peak activation + non-torch (incl. CUDA graphs)
    available_kv = requested - non_kv                (or --kv-memory, bypassing profiling)
    block_bytes  = layers x 2 x block_size x kv_heads/TP x head_dim x dtype_bytes
    num_blocks   = available_kv // block_bytes       (or --num-gpu-blocks); block 0 is the null block
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from sim.config import SimConfig, parse_bytes
from sim.errors import ConfigError
from sim.specs import GpuSpec, ModelSpec, resolve_gpu, resolve_model


# vLLM EngineArgs.get_batch_defaults (offline LLM entry point), vllm-v1-semantics.md s5.1
def batch_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks for this GPU."""
    gb = gpu.memory_gb
    if gb >= 160:
        return 16384, 1024
    if gb >= 70 and not gpu.key.startswith("a100"):
        return 16384, 1024
    return 8192, 256


@dataclass(frozen=True, slots=True)
class KvBudget:
    model: str
    gpu: str
    tensor_parallel_size: int
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    bytes_per_token: int          # per GPU (KV heads divided by TP)
    bytes_per_block: int
    requested_bytes: int
    weight_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    available_kv_bytes: int
    num_gpu_blocks: int           # includes the null block when the preset has one
    usable_blocks: int
    null_block: bool
    source: str                   # "profiled estimate" | "--kv-memory" | "--num-gpu-blocks"

    @property
    def kv_cache_tokens(self) -> int:
        return int(self.max_concurrency * self.max_model_len)

    @property
    def max_concurrency(self) -> float:
        # vLLM 0.33: num_blocks INCLUDES the null block; blocks per request = cdiv(max_model_len, B)
        return self.num_gpu_blocks / math.ceil(self.max_model_len / self.block_size)

    @property
    def pool_slots(self) -> int:
        return self.usable_blocks * self.block_size

    def log_lines(self) -> list[str]:
        return [
            f"GPU KV cache size: {self.kv_cache_tokens:,} tokens",
            f"Maximum concurrency for {self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x",
        ]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(kv_cache_tokens=self.kv_cache_tokens, max_concurrency=round(self.max_concurrency, 4),
                 pool_slots=self.pool_slots, log_lines=self.log_lines())
        return d


def activation_estimate(model: ModelSpec, tp: int, max_batched: int, max_seqs: int) -> int:
    """Peak transient memory of vLLM's profile run (an estimate; override with --activation-memory).

    The MLP intermediate (gate+up, 2 x ffn/TP per token) plus a few hidden-size buffers for
    ``max_num_batched_tokens`` tokens, plus fp32 logits for ``max_num_seqs`` sampled rows.
    """
    per_tok = (2 * model.ffn // tp + 4 * model.hidden) * model.dtype_bytes
    return max_batched * per_tok + max_seqs * model.vocab * 4


def budget_for(cfg: SimConfig) -> KvBudget:
    """:func:`compute_budget` with the config's model and GPU looked up in the catalog."""
    return compute_budget(cfg, resolve_model(cfg.model), resolve_gpu(cfg.gpu))


def compute_budget(cfg: SimConfig, model: ModelSpec, gpu: GpuSpec) -> KvBudget:
    """vLLM 0.33's KV budget for ``cfg`` on resolved specs (the catalog lookup is the caller's)."""
    tp = cfg.tensor_parallel_size
    if model.kv_heads % tp and tp % model.kv_heads:
        raise ConfigError(f"--tensor-parallel-size {tp}: must divide or be a multiple of the model's {model.kv_heads} KV heads")
    bs = cfg.block_size
    mbt_default, seqs_default = batch_defaults(gpu)
    max_seqs = cfg.max_num_seqs or seqs_default
    max_len = cfg.max_model_len or model.max_model_len
    max_batched = cfg.max_num_batched_tokens or mbt_default
    if not cfg.resolved("chunked_prefill"):
        max_batched = max(max_batched, max_len)  # vLLM: without chunking a whole prompt must fit
    if max_batched < max_seqs:
        raise ConfigError(f"--max-num-batched-tokens {max_batched} must be >= --max-num-seqs {max_seqs}")
    util = cfg.resolved("gpu_memory_utilization")
    bpt = model.kv_bytes_per_token(tp)
    bpb = bpt * bs
    requested = math.ceil(gpu.memory_bytes * util)
    weights = model.weight_bytes // tp
    act = parse_bytes(cfg.activation_memory, "--activation-memory") if cfg.activation_memory else \
        activation_estimate(model, tp, max_batched, max_seqs)
    non_torch = parse_bytes(cfg.non_torch_memory, "--non-torch-memory")
    null = bool(cfg.resolved("null_block"))
    if cfg.num_gpu_blocks is not None:
        available, blocks, source = cfg.num_gpu_blocks * bpb, cfg.num_gpu_blocks, "--num-gpu-blocks"
    elif cfg.kv_memory is not None:
        available = parse_bytes(cfg.kv_memory)
        blocks, source = available // bpb, "--kv-memory"
    else:
        available = requested - weights - act - non_torch
        if available <= 0:
            raise ConfigError(
                f"{model.name} on {tp}x {gpu.name}: no memory left for the KV cache "
                f"(weights {weights / 2**30:.1f} GiB + activations {act / 2**30:.1f} GiB + overhead "
                f"{non_torch / 2**30:.1f} GiB > {requested / 2**30:.1f} GiB at gpu_memory_utilization={util}); "
                "raise --tensor-parallel-size or pick a larger GPU")
        blocks, source = available // bpb, "profiled estimate"
    usable = blocks - 1 if null else blocks
    if usable < 1:
        raise ConfigError(f"KV pool has {blocks} blocks of {bpb:,} B: not enough for a single block")
    need = math.ceil(max_len / bs)
    if need > usable:
        fits = usable * bs
        raise ConfigError(
            f"--max-model-len {max_len}: one request of that length needs {need} blocks but the KV pool "
            f"has {usable}; the largest max_model_len that fits is {fits} (lower --max-model-len or add memory)")
    return KvBudget(
        model=model.key, gpu=gpu.key, tensor_parallel_size=tp, block_size=bs, max_model_len=max_len,
        max_num_seqs=max_seqs, max_num_batched_tokens=max_batched, bytes_per_token=bpt,
        bytes_per_block=bpb, requested_bytes=requested, weight_bytes=weights, activation_bytes=act,
        non_torch_bytes=non_torch, available_kv_bytes=int(available), num_gpu_blocks=int(blocks),
        usable_blocks=int(usable), null_block=null, source=source)
