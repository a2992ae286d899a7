"""Is a Hugging Face model's MLP gated? (The step-cost model's up projection is 2 x ffn wide if so.)

Gated (SwiGLU / GeGLU: ``gate_proj`` and ``up_proj``, then ``down_proj``): Llama, Mistral, Qwen,
Gemma, Phi-3, DeepSeek. Not gated (one ``fc1`` up projection, an activation, ``fc2``): OPT, BLOOM,
GPT-2 / Neo / NeoX / J, Falcon, Phi-1/2, MPT, StarCoder.
"""

from __future__ import annotations

from typing import Any

# HF ``model_type`` values whose MLP is one up projection + activation (no gate)
NON_GATED = frozenset({"opt", "bloom", "gpt2", "gpt_neo", "gpt_neox", "gptj", "gpt_bigcode",
                       "falcon", "phi", "mpt", "codegen", "starcoder2", "biogpt", "xglm"})
_ARCH_NAMES = frozenset(k.replace("_", "") for k in NON_GATED)


def gated_mlp(cfg: dict[str, Any]) -> bool:
    """Whether a HF ``config.json`` (parsed) describes a gated MLP.

    ``model_type`` or the ``architectures`` class name decides for the known families above. An
    unknown family is judged by how it names its activation: GPT-style ``activation_function``
    (``relu``, ``gelu_new``; OPT also has ``ffn_dim``) means no gate, Llama-style ``hidden_act``
    means a gate.
    """
    kind = str(cfg.get("model_type", "")).lower()
    archs = [str(a).lower().removesuffix("forcausallm").removesuffix("lmheadmodel")
             for a in cfg.get("architectures") or []]
    if kind in NON_GATED or any(a in _ARCH_NAMES for a in archs):
        return False
    return "activation_function" not in cfg and "ffn_dim" not in cfg
