"""Model and GPU catalog (``sim/specs/*.yaml``) and Hugging Face ``config.json`` reading."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError


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

    @property
    def weight_bytes(self) -> int:
        return int(self.params_b * 1e9 * self.dtype_bytes)

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """K and V for every layer: 2 x layers x kv_heads/TP x head_dim x dtype bytes."""
        return 2 * self.layers * self.kv_heads_per_gpu(tp) * self.head_dim * self.dtype_bytes

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        # vLLM replicates KV heads when TP > kv_heads: each GPU keeps at least one.
        return max(1, self.kv_heads // tp)


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
    text = resources.files("sim").joinpath("specs", name).read_text()
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


@cache
def model_catalog() -> dict[str, ModelSpec]:
    return {k: ModelSpec(key=k, **v) for k, v in _load_yaml("models.yaml").items()}


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
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"--model {path}: cannot read config.json ({e})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"--model {path}: config.json is not a JSON object")

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
    # Parameter estimate: attention (q, o full; k, v by kv heads) + gated MLP + embeddings.
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * ffn
    params = layers * (attn + mlp) + 2 * vocab * hidden
    return ModelSpec(
        key=str(path), name=str(cfg.get("_name_or_path") or path.parent.name or "custom"),
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        ffn=ffn, vocab=vocab, params_b=params / 1e9, dtype_bytes=_HF_DTYPES[dtype],
        max_model_len=max_len,
    )


def resolve_model(name: str) -> ModelSpec:
    cat = model_catalog()
    if name.lower() in cat:
        return cat[name.lower()]
    p = Path(name)
    if p.suffix == ".json" or p.is_dir() or p.exists():
        if p.is_dir():
            p = p / "config.json"
        if not p.exists():
            raise ConfigError(f"--model {name}: no such file")
        return model_from_hf_config(p)
    raise ConfigError(f"--model {name!r}: not in the catalog ({', '.join(cat)}) and not a config.json path")


def resolve_gpu(name: str) -> GpuSpec:
    cat = gpu_catalog()
    if name.lower() not in cat:
        raise ConfigError(f"--gpu {name!r}: not in the catalog ({', '.join(cat)})")
    return cat[name.lower()]
