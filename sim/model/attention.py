"""A model's attention layout: which layers are full, sliding-window, chunked-local or MLA.

vLLM 0.33 gives every attention layer a KV-cache spec (``vllm/v1/kv_cache_interface.py``):

    kind            vLLM spec                    KV bytes per token per layer (per GPU)
    full            FullAttentionSpec            2 x kv_heads/TP x head_dim x dtype   (K and V)
    sliding_window  SlidingWindowSpec            same page as full; only the last `window` tokens are read
    chunked_local   ChunkedLocalAttentionSpec    same page as full; only the current `window`-token chunk
    mla             MLAAttentionSpec             1 x (kv_lora_rank + qk_rope_head_dim) x dtype, NOT split by TP

A layout is stored as a *pattern* of kinds that repeats over the layers (the way Hugging Face
configs write it: Gemma-3's ``sliding_window_pattern: 6`` is five sliding layers then one full
one; gpt-oss alternates sliding and full; Llama-4's ``no_rope_layer_interval: 4`` is three
chunked-local layers then one full). An empty pattern means every layer is ``full`` (``mla``
when the model has ``kv_lora_rank``). A full per-layer ``layer_types`` list is a pattern whose
period is the number of layers.

:func:`attention_groups` is what the KV allocator reads: one :class:`AttentionGroup` per kind,
in order of the kind's first layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast, get_args

from sim.errors import ConfigError

AttentionKind = Literal["full", "sliding_window", "chunked_local", "mla"]
KINDS: tuple[AttentionKind, ...] = get_args(AttentionKind)


@dataclass(frozen=True, slots=True)
class AttentionGroup:
    """Layers of one attention kind (one vLLM KV-cache spec type).

    ``window`` is the sliding window (``sliding_window``) or the chunk (``chunked_local``) in
    tokens; ``None`` for ``full`` and ``mla``. ``bytes_per_token`` is the KV bytes one token
    takes in ONE layer of the group on one GPU (the per-layer page of vLLM's spec divided by the
    block size).
    """

    kind: AttentionKind
    num_layers: int
    window: int | None
    bytes_per_token: int


def layer_kinds(layers: int, pattern: tuple[str, ...], mla: bool) -> tuple[AttentionKind, ...]:
    """The kind of every layer, ``pattern`` repeated over ``layers`` (empty: all full/mla)."""
    if not pattern:
        return ("mla" if mla else "full",) * layers
    return tuple(cast(AttentionKind, pattern[i % len(pattern)]) for i in range(layers))


def check_layout(name: str, pattern: tuple[str, ...], sliding_window: int | None,
                 attention_chunk_size: int | None, mla: bool) -> None:
    """One-line :class:`ConfigError` for a layout that cannot be sized."""
    for k in pattern:
        if k not in KINDS:
            raise ConfigError(f"model {name}: layer_pattern kind {k!r} is not one of {', '.join(KINDS)}")
    if mla and any(k != "mla" for k in pattern):
        raise ConfigError(f"model {name}: an MLA model (kv_lora_rank) must have only mla layers")
    if "mla" in pattern and not mla:
        raise ConfigError(f"model {name}: mla layers need kv_lora_rank and qk_rope_head_dim")
    for kind, field, value in (("sliding_window", "sliding_window", sliding_window),
                               ("chunked_local", "attention_chunk_size", attention_chunk_size)):
        if kind in pattern and (value is None or value < 1):
            raise ConfigError(f"model {name}: {kind} layers need a positive '{field}' (got {value})")


def group_layers(kinds: tuple[AttentionKind, ...], sliding_window: int | None,
                 attention_chunk_size: int | None, bytes_per_token: dict[AttentionKind, int],
                 ) -> tuple[AttentionGroup, ...]:
    """One group per kind present, in order of each kind's first layer."""
    order = list(dict.fromkeys(kinds))
    window: dict[AttentionKind, int | None] = {
        "full": None, "mla": None, "sliding_window": sliding_window, "chunked_local": attention_chunk_size}
    return tuple(AttentionGroup(k, kinds.count(k), window[k], bytes_per_token[k]) for k in order)


@dataclass(frozen=True, slots=True)
class KvCacheGroup:
    """One vLLM KV-cache group (``KVCacheGroupSpec``): layers that share one block table.

    Every group takes its blocks from the one shared pool; a block holds one page for each of
    ``layers_per_block`` layers (the group size), so a group with fewer real layers than that
    leaves padding pages unused.
    """

    kind: AttentionKind
    window: int | None
    num_layers: int


def kv_cache_groups(groups: tuple[AttentionGroup, ...], hybrid: bool = True,
                    ) -> tuple[tuple[KvCacheGroup, ...], int]:
    """vLLM 0.33's KV-cache groups for a layout, and the number of layers one block covers.

    Follows ``vllm/v1/core/kv_cache_planning.py``: a single kind is one group of all layers
    (``_get_kv_cache_groups_uniform_spec``). Several kinds (``_get_kv_cache_groups_uniform_page_size``):
    the group size is the smallest kind's layer count (the largest one when the largest is
    < 1.5x the smallest), and each kind is split into ``cdiv(n, group_size)`` groups, layer i
    going to group ``i % num_groups``. Gemma-3-27B: 52 sliding + 10 full -> group size 10, six
    sliding groups (9, 9, 9, 9, 8, 8 layers) and one full group. With the hybrid manager off
    (``--disable-hybrid-kv-cache-manager``), sliding and chunked layers next to full ones are
    treated as full (``unify_hybrid_kv_cache_specs``): one group.
    """
    kinds = {g.kind for g in groups}
    if len(groups) == 1 or (not hybrid and "full" in kinds):
        kind = groups[0].kind if len(groups) == 1 else "full"
        total = sum(g.num_layers for g in groups)
        return (KvCacheGroup(kind, groups[0].window if len(groups) == 1 else None, total),), total
    counts = [g.num_layers for g in groups]
    size = min(counts)
    if max(counts) < size * 1.5:
        size = max(counts)
    out: list[KvCacheGroup] = []
    for g in groups:
        n_groups = -(-g.num_layers // size)
        out.extend(KvCacheGroup(g.kind, g.window, len(range(i, g.num_layers, n_groups)))
                   for i in range(n_groups))
    return tuple(out), size


def blocks_per_request(group: KvCacheGroup, max_model_len: int, block_size: int,
                       max_num_batched_tokens: int) -> int:
    """Blocks one ``max_model_len`` request holds in a group at its peak (``max_memory_usage_bytes``).

    full / mla:     cdiv(max_model_len, B)
    sliding_window: cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), B) + 1
    chunked_local:  cdiv(min(window + max_num_batched_tokens, max_model_len), B)
    (``vllm/v1/kv_cache_interface.py``: FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec.)
    """
    if group.kind == "sliding_window" and group.window is not None:
        tokens = min(group.window - 1 + max_num_batched_tokens, max_model_len)
        return -(-tokens // block_size) + 1
    if group.kind == "chunked_local" and group.window is not None:
        return -(-min(group.window + max_num_batched_tokens, max_model_len) // block_size)
    return -(-max_model_len // block_size)
