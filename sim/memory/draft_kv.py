"""The speculative drafter's own KV in the block pool (``--num-speculative-tokens`` with a draft layer).

vLLM allocates KV for every attention layer the model runner holds, the drafter's included: an
EAGLE / EAGLE-3 head and DeepSeek's MTP module add their attention layer(s) to the target's
KV-cache group, so a block holds one more page and fewer blocks fit (``get_kv_cache_spec`` walks
all attention layers; ``get_kv_cache_config_from_groups`` sizes one page per layer). kvsim models
**one draft layer with the target's KV shape**: EAGLE-1/EAGLE-3 heads are one decoder layer with the
target's KV heads and head size, and DeepSeek-V3's ``num_nextn_predict_layers`` is 1 (an MLA layer).
ngram drafts from the prompt and has no KV. Separate draft models (``method="draft_model"``), and
draft layers next to a hybrid model's several KV-cache groups, are not modelled::

    bytes_per_block' = bytes_per_block / layers x (layers + 1)
    num_blocks'      = available_kv // bytes_per_block'          (--num-gpu-blocks: unchanged)
"""

from __future__ import annotations

from dataclasses import replace

from sim.errors import ConfigError
from sim.memory.budget import KvBudget

#: draft layers of KV per method (vLLM ``SpeculativeConfig.method``)
DRAFT_LAYERS = {"ngram": 0, "eagle": 1, "eagle3": 1, "mtp": 1}


def with_draft_kv(budget: KvBudget, method: str) -> KvBudget:
    """``budget`` with the drafter's KV layer in every block (unchanged for ngram)."""
    extra = DRAFT_LAYERS[method]
    if not extra:
        return budget
    if budget.num_kv_cache_groups != 1:
        raise ConfigError(f"--speculative-method {method} on a hybrid model ({budget.num_kv_cache_groups} "
                          "KV-cache groups): the draft layer's KV is not modelled there; use ngram")
    layers = budget.layers_per_block
    bpb = budget.bytes_per_block // layers * (layers + extra)
    per_token = budget.bytes_per_token // layers * (layers + extra)
    if budget.source == "--num-gpu-blocks":
        blocks, available = budget.num_gpu_blocks, budget.num_gpu_blocks * bpb
    else:
        blocks, available = budget.available_kv_bytes // bpb, budget.available_kv_bytes
    usable = blocks - 1 if budget.null_block else blocks
    if usable < budget.blocks_per_request:
        raise ConfigError(f"--max-model-len {budget.max_model_len}: with the {method} draft layer's KV one "
                          f"request of that length needs {budget.blocks_per_request} blocks but the KV pool "
                          f"has {usable} (lower --max-model-len or add memory)")
    return replace(budget, bytes_per_block=bpb, bytes_per_token=per_token, layers_per_block=layers + extra,
                   available_kv_bytes=available, num_gpu_blocks=blocks, usable_blocks=usable)
