"""What a Hugging Face ``config.json`` says beyond a dense model: attention layout, MLA, MoE, quantization.

:func:`hf_shape_fields` returns the :class:`~sim.model.catalog.ModelSpec` fields to override on the spec
``model_from_hf_config`` reads from the common fields:

- ``layer_pattern`` from ``layer_types`` (gpt-oss, newer configs), ``sliding_window_pattern``
  (Gemma-3: P-1 local layers then a global one), ``model_type: gemma2`` (alternating), Llama-4's
  ``attention_chunk_size`` with ``no_rope_layers`` / ``no_rope_layer_interval`` (NoPE layers are
  global, the rest chunked-local), or a bare ``sliding_window`` (Mistral-7B-v0.1: every layer;
  ignored when ``use_sliding_window`` is false, as in Qwen2 configs);
- MLA (``kv_lora_rank`` + ``qk_rope_head_dim``; DeepSeek-V2/V3/R1, Kimi-K2), with ``head_dim`` =
  ``qk_nope_head_dim + qk_rope_head_dim``;
- a mixture-of-experts parameter count (``n_routed_experts`` / ``num_local_experts`` /
  ``num_experts``), which the dense estimate would miss by an order of magnitude;
- ``quantization_config`` (:mod:`sim.model.quant`); for ``mxfp4`` only the experts are quantized.

A multimodal config (Gemma-3, Llama-4) keeps the language model under ``text_config``:
:func:`text_config` merges it over the top level.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.errors import ConfigError
from sim.model.quant import from_hf

_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding_window",
                "chunked_attention": "chunked_local"}


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's fields: ``text_config`` (if any) over the top level."""
    inner = cfg.get("text_config")
    return {**cfg, **inner} if isinstance(inner, dict) else cfg


def _int(cfg: dict[str, Any], name: str, where: str) -> int | None:
    v = cfg.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        raise ConfigError(f"{where}: field '{name}' = {v!r} is not a non-negative integer")
    return int(v)


def layer_pattern(cfg: dict[str, Any], layers: int, where: str) -> tuple[str, ...]:
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or any(t not in _LAYER_TYPES for t in types):
            raise ConfigError(f"{where}: field 'layer_types' must list one of {sorted(_LAYER_TYPES)} per layer "
                              f"({layers} layers)")
        return tuple(_LAYER_TYPES[t] for t in types)
    if cfg.get("attention_chunk_size"):
        nope = cfg.get("no_rope_layers")
        if isinstance(nope, list) and len(nope) == layers:
            return tuple("chunked_local" if flag else "full" for flag in nope)
        k = _int(cfg, "no_rope_layer_interval", where) or 4
        return ("chunked_local",) * (k - 1) + ("full",)
    if cfg.get("sliding_window") is None or cfg.get("use_sliding_window") is False:
        return ()
    period = _int(cfg, "sliding_window_pattern", where)
    if period:
        return ("sliding_window",) * (period - 1) + ("full",)
    if cfg.get("model_type") in ("gemma2", "gemma2_text"):
        return ("sliding_window", "full")
    return ("sliding_window",)


def moe_params(cfg: dict[str, Any], layers: int, hidden: int, ffn: int, where: str) -> tuple[int, int] | None:
    """(MLP parameters of all layers, of which routed experts) for a MoE config; None if dense."""
    experts = _int(cfg, "n_routed_experts", where) or _int(cfg, "num_local_experts", where) \
        or _int(cfg, "num_experts", where)
    if not experts:
        return None
    expert_ffn = _int(cfg, "moe_intermediate_size", where) or ffn
    dense_ffn = _int(cfg, "intermediate_size_mlp", where) or ffn
    first_dense = _int(cfg, "first_k_dense_replace", where) or 0
    step = _int(cfg, "interleave_moe_layer_step", where) or _int(cfg, "decoder_sparse_step", where) or 1
    shared = _int(cfg, "n_shared_experts", where)
    if shared is None:
        shared = 1 if cfg.get("model_type") in ("llama4", "llama4_text") else 0
    moe_layers = sum(1 for i in range(first_dense, layers) if (i + 1) % step == 0)
    per_expert = 3 * hidden * expert_ffn  # gated: gate, up, down
    routed = moe_layers * experts * per_expert
    other = moe_layers * (shared * per_expert + hidden * experts) + (layers - moe_layers) * 3 * hidden * dense_ffn
    return routed + other, routed


def mla_attention_params(cfg: dict[str, Any], hidden: int, heads: int, rank: int, rope: int, where: str) -> int:
    nope = _int(cfg, "qk_nope_head_dim", where) or 128
    v_dim = _int(cfg, "v_head_dim", where) or nope
    q_rank = _int(cfg, "q_lora_rank", where)
    q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
    return q + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden


def hf_shape_fields(cfg: dict[str, Any], layers: int, hidden: int, heads: int, kv_heads: int,
                    head_dim: int, ffn: int, vocab: int, where: str) -> dict[str, Any]:
    """ModelSpec fields to override (see the module docstring)."""
    out: dict[str, Any] = {"tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False))}
    out["layer_pattern"] = layer_pattern(cfg, layers, where)
    if "sliding_window" in out["layer_pattern"]:
        out["sliding_window"] = _int(cfg, "sliding_window", where)
    if "chunked_local" in out["layer_pattern"]:
        out["attention_chunk_size"] = _int(cfg, "attention_chunk_size", where)
    rank, rope = _int(cfg, "kv_lora_rank", where), _int(cfg, "qk_rope_head_dim", where)
    mla = bool(rank) and bool(rope)
    if mla:
        assert rank is not None and rope is not None
        out.update(kv_lora_rank=rank, qk_rope_head_dim=rope, layer_pattern=(),
                   head_dim=(_int(cfg, "qk_nope_head_dim", where) or 128) + rope)
        attn = mla_attention_params(cfg, hidden, heads, rank, rope, where)
    else:
        attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    embeddings = vocab * hidden * (1 if out["tie_word_embeddings"] else 2)
    moe = moe_params(cfg, layers, hidden, ffn, where)
    quant = from_hf(cfg.get("quantization_config"), where)
    if moe is not None or mla:
        mlp = moe[0] if moe is not None else layers * 3 * hidden * ffn
        out["params_b"] = (layers * attn + mlp + embeddings) / 1e9
    if quant is not None and quant.method == "mxfp4" and moe is not None:
        quant = replace(quant, quantized_params_b=moe[1] / 1e9)
    out["quantization"] = quant
    if moe is not None:  # routing, for the MoE cost path (sim/cost/moe.py)
        experts = _int(cfg, "n_routed_experts", where) or _int(cfg, "num_local_experts", where) \
            or _int(cfg, "num_experts", where) or 0
        k = _int(cfg, "num_experts_per_tok", where) or _int(cfg, "moe_topk", where) or 1
        shared = _int(cfg, "n_shared_experts", where)
        if shared is None:
            shared = 1 if cfg.get("model_type") in ("llama4", "llama4_text") else 0
        out.update(num_experts=experts, experts_per_token=min(k, experts),
                   expert_ffn=_int(cfg, "moe_intermediate_size", where) or ffn, shared_experts=shared,
                   dense_layers=_int(cfg, "first_k_dense_replace", where) or 0)
    return out
