"""Config -> which paged KV allocator: one full-attention group (``PagedAllocator``) or several
KV-cache groups for sliding-window / chunked-local models (``HybridAllocator``); and which KV
connector goes behind its prefix cache (the CPU offload tier, ``OffloadConnector``).
Unsupported combinations are one-line :class:`~sim.errors.ConfigError` s naming the flag."""

from __future__ import annotations

from sim.config.schema import SimConfig
from sim.errors import ConfigError
from sim.kv.base import KvAllocator
from sim.kv.connector import KvConnector
from sim.kv.coordinator import HybridAllocator
from sim.kv.offload import OffloadConnector
from sim.kv.window import KvGroup, kv_groups
from sim.memory.budget import KvBudget
from sim.model.attention import kv_cache_groups
from sim.model.catalog import ModelSpec


def hybrid_groups(cfg: SimConfig, budget: KvBudget, model: ModelSpec, fork: bool) -> tuple[KvGroup, ...]:
    """The KV-cache groups of a model with sliding-window or chunked-local layers (vLLM's hybrid
    KV manager); () when one full-attention group holds every layer."""
    groups, _ = kv_cache_groups(model.attention_groups(cfg.tensor_parallel_size),
                                hybrid=not cfg.disable_hybrid_kv_cache_manager)
    if len(groups) == 1 and groups[0].kind in ("full", "mla"):
        return ()
    unsupported = ("--sharing fork-cow" if fork else "--preemption swap" if cfg.preemption == "swap"
                   else "--kv-offloading-size" if cfg.kv_offloading_size else "" if budget.null_block
                   else "no null block (--preset paper-v0)")
    if unsupported:
        raise ConfigError(f"--model {cfg.model}: its sliding-window/chunked-local KV groups are not modelled "
                          f"with {unsupported} (--disable-hybrid-kv-cache-manager allocates them as full)")
    return kv_groups(groups, budget.max_model_len, cfg.block_size, budget.max_num_batched_tokens)


def offload_blocks(cfg: SimConfig, budget: KvBudget) -> int:
    """CPU blocks of ``--kv-offloading-size``: GiB for the whole replica, split over its TP ranks
    (vLLM ``CPUOffloadingSpec``: bytes / (block bytes per rank x world size))."""
    size = cfg.kv_offloading_size or 0.0
    if not cfg.resolved("enable_prefix_caching"):
        raise ConfigError("--kv-offloading-size: kvsim keys the CPU tier by prefix-cache hashes; "
                          "it needs --enable-prefix-caching")
    per_block = budget.bytes_per_block * cfg.tensor_parallel_size
    n = int(size * 2**30) // per_block
    if n < 1:
        raise ConfigError(f"--kv-offloading-size {size}: smaller than one KV block ({per_block:,} B over the replica)")
    return n


def paged_variant(cfg: SimConfig, budget: KvBudget, model: ModelSpec, fork: bool) -> KvAllocator | None:
    """A hybrid allocator when the model calls for one, else None."""
    if cfg.allocator != "paged":
        if cfg.kv_offloading_size:
            raise ConfigError("--kv-offloading-size: needs --allocator paged")
        return None
    groups = hybrid_groups(cfg, budget, model, fork)
    if groups:
        return HybridAllocator(budget.num_gpu_blocks, cfg.block_size, groups, free_order=cfg.resolved("free_order"),
                               enable_caching=bool(cfg.resolved("enable_prefix_caching")))
    return None


def make_connector(cfg: SimConfig, budget: KvBudget, kv: KvAllocator) -> KvConnector | None:
    """The KV connector the flags ask for, connected to ``kv``; None without one."""
    if not cfg.kv_offloading_size:
        return None
    c = OffloadConnector(kv, offload_blocks(cfg, budget))
    kv.connect(c)
    return c
