"""Weight quantization: bytes the weights take on the GPU (a HF config's ``quantization_config``).

Only the quantized linear layers shrink; the rest (embeddings, LM head, norms, and whatever
the checkpoint keeps in 16 bit) stays at the model dtype::

    weight_bytes = (params - quantized_params) x dtype_bytes + quantized_params x bits_per_weight / 8

``bits_per_weight`` counts the per-group metadata the checkpoint stores next to the codes:

    fp8          8                             (per-tensor, per-channel or 128x128-block fp32
                                                scales: < 0.01 bit per weight, not counted)
    awq, gptq    bits + (16 + bits)/group_size (an fp16 scale and a `bits`-bit zero point per
                                                group; 4-bit, group 128 -> 4.156)
    mxfp4        4 + 8/32 = 4.25               (OCP MX: one 8-bit E8M0 scale per 32 weights)

When the number of quantized parameters is not given, every parameter but the embeddings and
the LM head is taken to be quantized (vLLM's fp8/AWQ/GPTQ methods quantize the linear layers;
``lm_head`` and ``embed_tokens`` stay unquantized by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import ConfigError

METHODS = ("fp8", "awq", "gptq", "mxfp4")


@dataclass(frozen=True, slots=True)
class WeightQuant:
    method: str                         # vLLM --quantization / HF quant_method
    bits: int = 8                       # bits of one quantized weight code
    group_size: int = 0                 # weights sharing one scale (0: per tensor/channel/block)
    quantized_params_b: float | None = None  # None: all but embeddings and LM head

    @property
    def bits_per_weight(self) -> float:
        if self.method == "fp8":
            return 8.0
        if self.method == "mxfp4":
            return 4.0 + 8 / 32
        if self.group_size > 0:  # awq, gptq: fp16 scale + packed zero point per group
            return self.bits + (16 + self.bits) / self.group_size
        return float(self.bits)


def weight_quant(data: Any, where: str) -> WeightQuant | None:
    """A catalog entry's ``quantization`` mapping (or an existing WeightQuant) -> WeightQuant."""
    if data is None or isinstance(data, WeightQuant):
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: 'quantization' must be a mapping with a 'method'")
    try:
        q = WeightQuant(**data)
    except TypeError as e:
        raise ConfigError(f"{where}: 'quantization': {e}") from None
    check(q, where)
    return q


def check(q: WeightQuant, where: str) -> None:
    if q.method not in METHODS:
        raise ConfigError(f"{where}: quantization method {q.method!r} is not one of {', '.join(METHODS)}")
    if q.method in ("awq", "gptq") and q.bits not in (2, 3, 4, 8):
        raise ConfigError(f"{where}: {q.method} 'bits' = {q.bits}: expected 2, 3, 4 or 8")


def from_hf(qc: Any, where: str) -> WeightQuant | None:
    """A Hugging Face ``quantization_config`` -> WeightQuant (None when absent)."""
    if qc is None:
        return None
    if not isinstance(qc, dict) or "quant_method" not in qc:
        raise ConfigError(f"{where}: field 'quantization_config' has no 'quant_method'")
    method = str(qc["quant_method"]).lower()
    if method not in METHODS:
        raise ConfigError(f"{where}: field 'quantization_config.quant_method' = {method!r} is not one of "
                          f"{', '.join(METHODS)}")
    if method in ("awq", "gptq"):
        bits = qc.get("bits", qc.get("w_bit", 4))
        group = qc.get("group_size", qc.get("q_group_size", 128))
        if not isinstance(bits, int) or not isinstance(group, int):
            raise ConfigError(f"{where}: field 'quantization_config.bits'/'group_size' must be integers")
        q = WeightQuant(method, bits=bits, group_size=max(group, 0))
    elif method == "mxfp4":
        q = WeightQuant(method, bits=4, group_size=32)
    else:
        q = WeightQuant(method, bits=8)
    check(q, where)
    return q


def weight_bytes(params_b: float, dtype_bytes: int, embedding_params: int, q: WeightQuant | None) -> int:
    """Bytes of all weights of one model replica (before tensor-parallel sharding)."""
    total = params_b * 1e9
    if q is None:
        return int(total * dtype_bytes)
    quantized = q.quantized_params_b * 1e9 if q.quantized_params_b is not None else total - embedding_params
    quantized = min(max(quantized, 0.0), total)
    return round((total - quantized) * dtype_bytes + quantized * q.bits_per_weight / 8)
