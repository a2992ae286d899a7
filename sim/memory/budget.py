"""KV budget: how many blocks fit, computed the way vLLM 0.33 does (vllm-v1-semantics.md s8).

::

    requested    = ceil(gpu_memory x gpu_memory_utilization)            per GPU
    non_kv       = weights/TP + peak activation + non-torch (incl. CUDA graphs)
    available_kv = requested - non_kv                (or --kv-memory, bypassing profiling)
    page         = block_size x one layer's KV per token (2 x kv_heads/TP x head_dim x kv dtype;
                   MLA: (kv_lora_rank + qk_rope_head_dim) x kv dtype on every TP rank)
    block_bytes  = layers_per_block x page           (all layers for a uniform model)
    num_blocks   = available_kv // block_bytes       (or --num-gpu-blocks); block 0 is the null block

A hybrid model (sliding-window or chunked-local layers next to full ones) has several KV-cache
groups sharing the pool (``sim.model.attention.kv_cache_groups``): a block holds one page for each of
``layers_per_block`` layers, and one request takes blocks in every group. The capacity log line
divides by the blocks one ``max_model_len`` request holds, summed over the groups
(``vllm/v1/core/kv_cache_utils.py:get_max_concurrency_for_kv_cache_config``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from sim.config.schema import SimConfig, parse_bytes
from sim.errors import ConfigError
from sim.model.attention import KvCacheGroup, blocks_per_request, kv_cache_groups
from sim.model.catalog import GpuSpec, ModelSpec, resolve_gpu, resolve_model

#: ``--kv-cache-dtype`` -> bytes per element (``auto`` keeps the model's dtype).
KV_CACHE_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# vllm/config/cache.py CacheConfig._verify_cache_dtype logs this for every fp8 variant
FP8_LOG_LINE = ("Using fp8 data type to store kv cache. It reduces the GPU memory footprint and boosts "
                "the performance. Meanwhile, it may cause accuracy drop without a proper scaling factor")


def batch_defaults(gpu: GpuSpec, usage_context: str = "openai-server") -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM 0.33 picks for this GPU and entry point.

    ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py; vllm-v1-semantics.md s5.1) keys
    them on the usage context: ``openai-server`` is ``vllm serve`` (kvsim's default: a server is
    what a latency SLO is about), ``llm-class`` the offline ``LLM(...)`` class.
    """
    gb, server = gpu.memory_gb, usage_context == "openai-server"
    if gb >= 160:
        return 16384, 1024
    if gb >= 70 and not gpu.key.startswith("a100"):  # vLLM: large budgets slow A100 down (PR #17885)
        return (8192 if server else 16384), 1024
    return (2048 if server else 8192), 256


@dataclass(frozen=True, slots=True)
class KvBudget:
    model: str
    gpu: str
    tensor_parallel_size: int
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str           # --kv-cache-dtype as given ("auto" = the model's dtype)
    bytes_per_token: int          # per GPU, every layer as if full (KV heads divided by TP; MLA not)
    bytes_per_block: int          # one pool block: layers_per_block pages
    layers_per_block: int         # all layers for a uniform model; the group size for a hybrid one
    num_kv_cache_groups: int      # vLLM KV-cache groups sharing the pool (1 unless hybrid)
    blocks_per_request: int       # blocks one max_model_len request holds, summed over the groups
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
        # vLLM 0.33: num_blocks INCLUDES the null block; blocks per request summed over groups
        return self.num_gpu_blocks / self.blocks_per_request

    @property
    def pool_slots(self) -> int:
        return self.usable_blocks * self.block_size

    def log_lines(self) -> list[str]:
        fp8 = [FP8_LOG_LINE] if self.kv_cache_dtype in KV_CACHE_DTYPE_BYTES else []
        return [*fp8,
                f"GPU KV cache size: {self.kv_cache_tokens:,} tokens",
                f"Maximum concurrency for {self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x"]

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


def model_for(cfg: SimConfig, model: ModelSpec) -> ModelSpec:
    """``model`` as the engine stores its KV: ``--kv-cache-dtype`` applied (``auto``: model dtype)."""
    nbytes = KV_CACHE_DTYPE_BYTES.get(cfg.kv_cache_dtype)
    return model if nbytes is None else replace(model, kv_cache_dtype_bytes=nbytes)


def budget_for(cfg: SimConfig) -> KvBudget:
    """:func:`compute_budget` with the config's model and GPU looked up in the catalog."""
    return compute_budget(cfg, resolve_model(cfg.model), resolve_gpu(cfg.gpu))


def request_blocks(groups: tuple[KvCacheGroup, ...], max_len: int, bs: int, max_batched: int) -> int:
    return sum(blocks_per_request(g, max_len, bs, max_batched) for g in groups)


def largest_fitting_len(groups: tuple[KvCacheGroup, ...], usable: int, bs: int, max_batched: int,
                        max_len: int) -> int:
    """The largest max_model_len whose request fits ``usable`` blocks (vLLM's estimate_max_model_len)."""
    lo, hi = 0, max_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if request_blocks(groups, mid, bs, max_batched) <= usable:
            lo = mid
        else:
            hi = mid - 1
    return lo


def compute_budget(cfg: SimConfig, spec: ModelSpec, gpu: GpuSpec) -> KvBudget:
    """vLLM 0.33's KV budget for ``cfg`` on resolved specs (the catalog lookup is the caller's)."""
    model = model_for(cfg, spec)
    tp = cfg.tensor_parallel_size
    if not model.is_mla and model.kv_heads % tp and tp % model.kv_heads:
        raise ConfigError(f"--tensor-parallel-size {tp}: must divide or be a multiple of the model's {model.kv_heads} KV heads")
    bs = cfg.block_size
    mbt_default, seqs_default = batch_defaults(gpu, cfg.usage_context)
    max_seqs = cfg.max_num_seqs or seqs_default
    max_len = cfg.max_model_len or model.max_model_len
    if max_len > model.max_model_len:  # vLLM refuses too (unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)
        raise ConfigError(f"--max-model-len {max_len}: greater than {model.name}'s context length "
                          f"{model.max_model_len:,} (max_position_embeddings); vLLM refuses this too")
    max_batched = cfg.max_num_batched_tokens or mbt_default
    if not cfg.resolved("chunked_prefill"):
        max_batched = max(max_batched, max_len)  # vLLM: without chunking a whole prompt must fit
    if cfg.max_num_batched_tokens is None:  # _set_default_max_num_seqs_and_batched_tokens_args
        max_batched = min(max_seqs * max_len, max_batched)
    if cfg.max_num_seqs is None:
        max_seqs = min(max_seqs, max_batched)
    if max_batched < max_seqs:
        raise ConfigError(f"--max-num-batched-tokens {max_batched} must be >= --max-num-seqs {max_seqs}")
    util = cfg.resolved("gpu_memory_utilization")
    groups, per_block = kv_cache_groups(model.attention_groups(tp), hybrid=not cfg.disable_hybrid_kv_cache_manager)
    bpb = per_block * model.layer_bytes_per_token(tp) * bs
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
    need = request_blocks(groups, max_len, bs, max_batched)
    if need > usable:
        fits = largest_fitting_len(groups, usable, bs, max_batched, max_len)
        raise ConfigError(
            f"--max-model-len {max_len}: one request of that length needs {need} blocks but the KV pool "
            f"has {usable}; the largest max_model_len that fits is {fits} (lower --max-model-len or add memory)")
    return KvBudget(
        model=model.key, gpu=gpu.key, tensor_parallel_size=tp, block_size=bs, max_model_len=max_len,
        max_num_seqs=max_seqs, max_num_batched_tokens=max_batched, kv_cache_dtype=cfg.kv_cache_dtype,
        bytes_per_token=model.kv_bytes_per_token(tp), bytes_per_block=bpb, layers_per_block=per_block,
        num_kv_cache_groups=len(groups), blocks_per_request=need, requested_bytes=requested,
        weight_bytes=weights, activation_bytes=act, non_torch_bytes=non_torch,
        available_kv_bytes=int(available), num_gpu_blocks=int(blocks), usable_blocks=int(usable),
        null_block=null, source=source)
