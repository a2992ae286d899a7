"""Model and GPU catalog (``sim/model/data/*.yaml``) and Hugging Face ``config.json`` reading."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.model.attention import (
    KINDS,
    AttentionGroup,
    AttentionKind,
    check_layout,
    group_layers,
    layer_kinds,
)
from sim.model.hf_config import hf_shape_fields, text_config
from sim.model.mlp import gated_mlp
from sim.model.quant import WeightQuant, weight_quant
from sim.model.quant import weight_bytes as quant_weight_bytes
from sim.safe_yaml import safe_load


@dataclass(frozen=True, slots=True)
class ModelSpec:
    key: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    params_b: float
    dtype_bytes: int = 2
    max_model_len: int = 8192
    # attention layout (sim/model/attention.py); kv_lora_rank + qk_rope_head_dim make it MLA
    layer_pattern: tuple[str, ...] = ()
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    # weights (sim/model/quant.py) and the KV cache dtype (--kv-cache-dtype; None = auto = dtype_bytes)
    quantization: WeightQuant | None = None
    tie_word_embeddings: bool = False
    kv_cache_dtype_bytes: int | None = None
    # MLP with a gate (gate + up projections: Llama, Qwen) or one up projection (OPT, BLOOM); sim/model/mlp.py
    gated_mlp: bool = True
    # mixture of experts (sim/cost/moe.py): routed experts, top-k, one expert's width, shared experts,
    # leading dense layers (DeepSeek-V3: 3, with the dense ``ffn``); num_experts 0 = a dense model
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    dense_layers: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer_pattern", tuple(self.layer_pattern))
        object.__setattr__(self, "quantization", weight_quant(self.quantization, f"model {self.key}"))
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ConfigError(f"model {self.key}: MLA needs both kv_lora_rank and qk_rope_head_dim")
        check_layout(self.key, self.layer_pattern, self.sliding_window, self.attention_chunk_size, self.is_mla)
        if self.num_experts and not (0 < self.experts_per_token <= self.num_experts):
            raise ConfigError(f"model {self.key}: experts_per_token must be in 1..num_experts ({self.num_experts})")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def weight_bytes(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tie_word_embeddings else 2)
        return quant_weight_bytes(self.params_b, self.dtype_bytes, embeddings, self.quantization)

    @property
    def kv_dtype_bytes(self) -> int:
        return self.kv_cache_dtype_bytes or self.dtype_bytes

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """KV bytes of one token in every layer, per GPU (sliding layers counted as if full).

        Standard attention: 2 (K, V) x layers x kv_heads/TP x head_dim x kv dtype bytes;
        MLA: layers x (kv_lora_rank + qk_rope_head_dim) x kv dtype bytes on every TP rank.
        """
        return sum(g.num_layers * g.bytes_per_token for g in self.attention_groups(tp))

    def layer_bytes_per_token(self, tp: int = 1) -> int:
        """KV bytes of one token in ONE layer on one GPU (every layer of a model has the same)."""
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return 2 * self.kv_heads_per_gpu(tp) * self.head_dim * self.kv_dtype_bytes

    def layer_kinds(self) -> tuple[AttentionKind, ...]:
        """The attention kind of each layer, layer 0 first."""
        return layer_kinds(self.layers, self.layer_pattern, self.is_mla)

    def attention_groups(self, tp: int = 1) -> tuple[AttentionGroup, ...]:
        """One AttentionGroup(kind, num_layers, window, bytes_per_token) per attention kind."""
        per_layer = self.layer_bytes_per_token(tp)
        return group_layers(self.layer_kinds(), self.sliding_window, self.attention_chunk_size,
                            dict.fromkeys(KINDS, per_layer))

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        # vLLM replicates KV heads when TP > kv_heads: each GPU keeps at least one.
        # MLA keeps one latent "head" that every rank holds whole (MLAAttentionSpec).
        return 1 if self.is_mla else max(1, self.kv_heads // tp)


@dataclass(frozen=True, slots=True)
class Price:
    low: float
    typical: float
    high: float
    source: str
    month: str
    unverified: bool


@dataclass(frozen=True, slots=True)
class GpuSpec:
    key: str
    name: str
    memory_gb: float
    bandwidth_tbps: float
    bf16_tflops: float
    nvlink_gbps: float
    pcie_gbps: float
    sms: int
    price: Price
    # dense tensor-core peaks by dtype (0: none) and the datasheet they come from (sim/cost/floor.py)
    fp8_tflops: float = 0.0
    fp4_tflops: float = 0.0
    source: str = ""

    @property
    def memory_bytes(self) -> int:
        """Memory torch reports as total: datasheet GiB less ~1% the driver keeps.

        (An H100 80GB reports 79.19 GiB, an A100-40GB 39.39 GiB.)
        """
        return int(self.memory_gb * 2**30 * 0.99)

    @property
    def bandwidth_bps(self) -> float:
        return self.bandwidth_tbps * 1e12

    @property
    def flops(self) -> float:
        return self.bf16_tflops * 1e12


def _load_yaml(name: str) -> dict[str, Any]:
    text = resources.files("sim.model").joinpath("data", name).read_text()
    data = safe_load(text)
    assert isinstance(data, dict)
    return data


@cache
def model_catalog() -> dict[str, ModelSpec]:
    return {k: ModelSpec(key=k, **{f: x for f, x in v.items() if f != "hf_ids"})
            for k, v in _load_yaml("models.yaml").items()}


@cache
def hf_ids() -> dict[str, str]:
    """Hugging Face repo id (lowercase) -> catalog key, from each entry's ``hf_ids``."""
    return {str(h).lower(): k for k, v in _load_yaml("models.yaml").items() for h in v.get("hf_ids", ())}


@cache
def gpu_catalog() -> dict[str, GpuSpec]:
    out = {}
    for k, v in _load_yaml("gpus.yaml").items():
        v = dict(v)
        price = Price(**v.pop("price_per_hour"))
        out[k] = GpuSpec(key=k, price=price, **v)
    return out


_HF_DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4, "fp8": 1, "float8_e4m3fn": 1}


def model_from_hf_config(path: Path) -> ModelSpec:
    """Read layers, KV heads, head_dim and dtype from a Hugging Face ``config.json``."""
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"--model {path}: cannot read config.json ({e})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"--model {path}: config.json is not a JSON object")
    cfg = text_config(cfg)  # multimodal configs keep the language model under text_config

    def get(*names: str, default: Any = None) -> Any:
        for n in names:
            if n in cfg and cfg[n] is not None:
                return cfg[n]
        if default is None:
            raise ConfigError(f"--model {path}: config.json has no field '{names[0]}'")
        return default

    layers = int(get("num_hidden_layers", "n_layer", "num_layers"))
    hidden = int(get("hidden_size", "d_model", "n_embd"))
    heads = int(get("num_attention_heads", "n_head"))
    kv_heads = int(get("num_key_value_heads", default=heads))
    head_dim = int(get("head_dim", default=hidden // heads))
    ffn = int(get("intermediate_size", "ffn_dim", default=4 * hidden))
    vocab = int(get("vocab_size", default=32000))
    dtype = str(get("torch_dtype", "dtype", default="float16"))
    if dtype not in _HF_DTYPES:
        raise ConfigError(f"--model {path}: field 'torch_dtype' = {dtype!r} is not one of {sorted(_HF_DTYPES)}")
    max_len = int(get("max_position_embeddings", default=8192))
    # Parameter estimate: attention (q, o full; k, v by kv heads) + MLP (3 matrices if gated, else 2) + embeddings.
    gated = gated_mlp(cfg)
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = (3 if gated else 2) * hidden * ffn
    params = layers * (attn + mlp) + 2 * vocab * hidden
    spec = ModelSpec(
        key=str(path), name=str(cfg.get("_name_or_path") or path.parent.name or "custom"),
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        ffn=ffn, vocab=vocab, params_b=params / 1e9, dtype_bytes=_HF_DTYPES[dtype],
        max_model_len=max_len, gated_mlp=gated,
    )
    extra = hf_shape_fields(cfg, layers, hidden, heads, kv_heads, head_dim, ffn, vocab, f"--model {path}")
    return replace(spec, **extra)  # sliding/chunked layers, MLA, MoE parameters, quantization


def resolve_model(name: str) -> ModelSpec:
    cat = model_catalog()
    if name.lower() in cat:
        return cat[name.lower()]
    if name.lower() in hf_ids():
        return cat[hf_ids()[name.lower()]]
    p = Path(name)
    if p.suffix == ".json" or p.is_dir() or p.exists():
        if p.is_dir():
            p = p / "config.json"
        if not p.exists():
            raise ConfigError(f"--model {name}: no such file")
        return model_from_hf_config(p)
    hint = " (a Hugging Face id kvsim does not know: pass its config.json path)" if "/" in name else ""
    raise ConfigError(f"--model {name!r}: not in the catalog ({', '.join(cat)}) and not a config.json path{hint}")


def resolve_gpu(name: str) -> GpuSpec:
    cat = gpu_catalog()
    if name.lower() not in cat:
        raise ConfigError(f"--gpu {name!r}: not in the catalog ({', '.join(cat)})")
    return cat[name.lower()]
