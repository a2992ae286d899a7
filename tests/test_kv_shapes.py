"""KV shapes of today's models (issue 11 items 6 and 8, and the catalog): one budget per shape.

Every number is worked out by hand in the test, following vLLM 0.33:
``vllm/v1/kv_cache_interface.py`` (page sizes, per-request peaks), ``vllm/v1/core/kv_cache_planning.py``
(groups, bytes per block, ``num_blocks = available // bytes_per_block``) and
``vllm/v1/core/kv_cache_utils.py`` (``max_concurrency = num_blocks / blocks per request summed
over groups``; ``GPU KV cache size = int(max_concurrency x max_model_len)``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.memory.budget import FP8_LOG_LINE, budget_for, compute_budget
from sim.model.attention import AttentionGroup, kv_cache_groups
from sim.model.catalog import ModelSpec, model_catalog, resolve_gpu

GiB = 2**30


# ------------------------------------------------------------------ fp8 KV cache (item 6)

def test_fp8_kv_halves_llama_bytes_and_doubles_blocks_with_vllms_log_lines() -> None:
    b = budget_for(make_config(kv_memory="50GB", max_model_len=8192, kv_cache_dtype="fp8"))
    assert b.bytes_per_token == 2 * 32 * 8 * 128 * 1 == 65_536        # K,V x layers x kv heads x head_dim x 1 B
    assert b.bytes_per_block == 16 * 65_536 == 1_048_576               # 1 MiB at block 16
    assert b.num_gpu_blocks == 50 * 10**9 // 1_048_576 == 47_683
    assert b.blocks_per_request == 8192 // 16 == 512
    # 47,683 / 512 = 93.1309x; int(93.1309 x 8192) = 762,928 (= 47,683 x 16)
    assert b.log_lines() == [
        FP8_LOG_LINE,
        "GPU KV cache size: 762,928 tokens",
        "Maximum concurrency for 8,192 tokens per request: 93.13x",
    ]


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_every_fp8_spelling_stores_one_byte(dtype: str) -> None:
    b = budget_for(make_config(kv_memory="50GB", max_model_len=8192, kv_cache_dtype=dtype))
    assert b.bytes_per_token == 65_536 and b.log_lines()[0] == FP8_LOG_LINE


def test_auto_keeps_the_model_dtype_and_vllms_two_lines() -> None:
    b = budget_for(make_config(kv_memory="50GB", max_model_len=8192, kv_cache_dtype="auto"))
    assert b.bytes_per_token == 131_072 and len(b.log_lines()) == 2


def test_unknown_kv_cache_dtype_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        make_config(kv_cache_dtype="int4")


# ------------------------------------------------------------------ MLA (item 8)

def test_deepseek_v3_mla_bytes_per_token_and_blocks() -> None:
    cfg = make_config(model="deepseek-v3", gpu="h200", tensor_parallel_size=8, kv_memory="40GiB",
                      block_size=64, max_model_len=32768)
    b = budget_for(cfg)
    assert b.bytes_per_token == 61 * (512 + 64) * 2 == 70_272          # layers x (kv_lora_rank + rope) x bf16
    assert b.bytes_per_block == 64 * 70_272 == 4_497_408
    assert b.num_gpu_blocks == 40 * GiB // 4_497_408 == 9_549
    assert b.blocks_per_request == 32768 // 64 == 512
    assert b.max_concurrency == pytest.approx(9_549 / 512)             # 18.65x
    assert b.kv_cache_tokens == int(9_549 / 512 * 32768) == 611_136


def test_mla_kv_is_replicated_across_tp_ranks_not_split() -> None:
    m = model_catalog()["deepseek-v3"]
    assert m.kv_bytes_per_token(tp=8) == m.kv_bytes_per_token(tp=1) == 70_272
    llama = model_catalog()["llama-3.1-70b"]
    assert llama.kv_bytes_per_token(tp=8) == llama.kv_bytes_per_token(tp=1) // 8   # GQA heads split


def test_mla_with_fp8_cache_is_576_bytes_per_layer() -> None:
    b = budget_for(make_config(model="deepseek-v3", gpu="h200", tensor_parallel_size=8, kv_memory="40GiB",
                               block_size=64, max_model_len=32768, kv_cache_dtype="fp8"))
    assert b.bytes_per_token == 61 * 576 * 1 == 35_136
    assert b.num_gpu_blocks == 40 * GiB // (64 * 35_136) == 19_099


def test_deepseek_v3_fp8_weights_and_tp_check() -> None:
    m = model_catalog()["deepseek-v3"]
    embed = 2 * 129_280 * 7_168                               # embed_tokens + lm_head stay bf16
    assert m.weight_bytes == pytest.approx(embed * 2 + (671e9 - embed) * 1, abs=1024)   # 626.7 GiB
    # MLA has no KV heads to divide: TP 3 is fine for the cache (vLLM's own head check aside)
    compute_budget(make_config(model="deepseek-v3", tensor_parallel_size=3, kv_memory="40GiB", block_size=64,
                               max_model_len=4096), m, resolve_gpu("h200"))


# ------------------------------------------------------------------ hybrid sliding window

def test_gemma_3_27b_hybrid_groups_blocks_and_concurrency() -> None:
    b = budget_for(make_config(model="gemma-3-27b", gpu="h100", kv_memory="40GiB", max_model_len=32768,
                               usage_context="llm-class"))  # LLM(...): 16,384 batched tokens
    page = 16 * 2 * 16 * 128 * 2                              # B x (K,V) x kv heads x head_dim x bf16
    assert page == 131_072
    assert b.bytes_per_token == 62 * 2 * 16 * 128 * 2 == 507_904   # every layer as if full
    # 52 sliding + 10 full: group size min(52, 10) = 10; 6 sliding groups + 1 full group
    assert (b.layers_per_block, b.num_kv_cache_groups) == (10, 7)
    assert b.bytes_per_block == 10 * page == 1_310_720
    assert b.num_gpu_blocks == 40 * GiB // 1_310_720 == 32_768
    # per request (H100 default max_num_batched_tokens 16384):
    #   sliding: cdiv(min(1024 - 1 + 16384, 32768), 16) + 1 = 1088 + 1 = 1089, six groups
    #   full:    32768 / 16 = 2048
    assert b.blocks_per_request == 6 * (math.ceil(17_407 / 16) + 1) + 2048 == 8_582
    assert b.log_lines() == ["GPU KV cache size: 125,115 tokens",              # int(32768 / 8582 x 32768)
                             "Maximum concurrency for 32,768 tokens per request: 3.82x"]


def test_gemma_3_without_the_hybrid_manager_is_one_full_group() -> None:
    b = budget_for(make_config(model="gemma-3-27b", gpu="h100", kv_memory="40GiB", max_model_len=32768,
                               disable_hybrid_kv_cache_manager=True))
    assert (b.layers_per_block, b.num_kv_cache_groups) == (62, 1)
    assert b.bytes_per_block == 62 * 131_072 == 8_126_464
    assert b.num_gpu_blocks == 40 * GiB // 8_126_464 == 5_285
    assert b.blocks_per_request == 2048 and f"{5_285 / 2048:.2f}" == "2.58"


def test_gpt_oss_120b_mxfp4_weights_fit_one_h100_and_its_two_groups() -> None:
    m = model_catalog()["gpt-oss-120b"]
    # model card: 114.71B MoE weights at 4.25 bits, the other 2.12B in bf16
    assert m.weight_bytes == pytest.approx(114.71e9 * 4.25 / 8 + (116.83e9 - 114.71e9) * 2, abs=1024)
    assert 60.6 < m.weight_bytes / GiB < 60.8                              # published checkpoint: 60.8 GiB
    b = budget_for(make_config(model="gpt-oss-120b", gpu="h100", kv_memory="10GiB", usage_context="llm-class"))
    page = 16 * 2 * 8 * 64 * 2                                 # 32,768 B
    assert (b.layers_per_block, b.num_kv_cache_groups) == (18, 2)          # 18 sliding = 18 full
    assert b.bytes_per_block == 18 * page == 589_824
    assert b.num_gpu_blocks == 10 * GiB // 589_824 == 18_204
    # sliding: cdiv(min(128 - 1 + 16384, 131072), 16) + 1 = 1032 + 1; full: 131072 / 16 = 8192
    assert b.blocks_per_request == 1033 + 8192 == 9_225
    assert b.kv_cache_tokens == int(18_204 / 9_225 * 131_072)
    # profiled: the quantized model leaves room on one H100; the same model in bf16 does not
    assert budget_for(make_config(model="gpt-oss-120b", gpu="h100", max_model_len=8192)).num_gpu_blocks > 0
    bf16 = replace(m, quantization=None)
    with pytest.raises(ConfigError, match="no memory left"):
        compute_budget(make_config(model="gpt-oss-120b", gpu="h100", max_model_len=8192), bf16, resolve_gpu("h100"))


def test_llama_4_scout_chunked_local_groups() -> None:
    b = budget_for(make_config(model="llama-4-scout", gpu="h100", tensor_parallel_size=4, kv_memory="20GiB", usage_context="llm-class",
                               max_model_len=131072))
    page = 16 * 2 * (8 // 4) * 128 * 2                          # 16,384 B: KV heads split over TP 4
    assert (b.layers_per_block, b.num_kv_cache_groups) == (12, 4)          # 36 chunked -> 3 groups, 12 full
    assert b.bytes_per_block == 12 * page == 196_608
    assert b.num_gpu_blocks == 20 * GiB // 196_608 == 109_226
    # chunked: cdiv(min(8192 + 16384, 131072), 16) = 1536 in each of 3 groups; full: 8192
    assert b.blocks_per_request == 3 * 1536 + 8192 == 12_800


def test_qwen3_32b_is_plain_gqa() -> None:
    b = budget_for(make_config(model="qwen3-32b", gpu="h100", kv_memory="20GiB"))
    assert b.bytes_per_token == 2 * 64 * 8 * 128 * 2 == 262_144
    assert b.num_gpu_blocks == 20 * GiB // (16 * 262_144) == 5_120
    assert b.log_lines()[1] == "Maximum concurrency for 40,960 tokens per request: 2.00x"   # 5120 / 2560


def test_hybrid_pool_too_small_names_the_largest_length_that_fits() -> None:
    # 9,225 blocks with the null block = 9,224 usable, one short of the 9,225 a 131,072-token request
    # holds. The sliding groups need 1033 at any length >= 16,511, leaving 8,191 full blocks = 131,056 tokens.
    cfg = make_config(model="gpt-oss-120b", gpu="h100", num_gpu_blocks=9_225, max_model_len=131072, usage_context="llm-class")
    with pytest.raises(ConfigError, match="largest max_model_len that fits is 131056"):
        budget_for(cfg)


# ------------------------------------------------------------------ the ModelSpec layout API

@pytest.mark.parametrize("key, groups", [
    ("llama-3.1-8b", [("full", 32, None)]),
    ("qwen3-32b", [("full", 64, None)]),
    ("gemma-3-27b", [("sliding_window", 52, 1024), ("full", 10, None)]),
    ("gpt-oss-20b", [("sliding_window", 12, 128), ("full", 12, None)]),
    ("gpt-oss-120b", [("sliding_window", 18, 128), ("full", 18, None)]),
    ("deepseek-v3", [("mla", 61, None)]),
    ("llama-4-scout", [("chunked_local", 36, 8192), ("full", 12, None)]),
])
def test_attention_groups_per_catalog_model(key: str, groups: list[tuple[str, int, int | None]]) -> None:
    m = model_catalog()[key]
    assert [(g.kind, g.num_layers, g.window) for g in m.attention_groups()] == groups
    assert sum(g.num_layers * g.bytes_per_token for g in m.attention_groups()) == m.kv_bytes_per_token()


def test_layer_kinds_follow_the_published_patterns() -> None:
    kinds = model_catalog()["gemma-3-27b"].layer_kinds()
    assert [i for i, k in enumerate(kinds) if k == "full"] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert model_catalog()["gpt-oss-20b"].layer_kinds()[:3] == ("sliding_window", "full", "sliding_window")
    assert [i for i, k in enumerate(model_catalog()["llama-4-scout"].layer_kinds()) if k == "full"][:3] == [3, 7, 11]


def test_vllm_groups_split_layers_round_robin_with_padding() -> None:
    groups, size = kv_cache_groups((AttentionGroup("sliding_window", 52, 1024, 8192),
                                    AttentionGroup("full", 10, None, 8192)))
    assert size == 10 and [g.num_layers for g in groups] == [9, 9, 9, 9, 8, 8, 10]
    # nearly equal counts use the larger as the group size (vLLM: max < 1.5 x min)
    groups, size = kv_cache_groups((AttentionGroup("sliding_window", 12, 128, 1), AttentionGroup("full", 13, None, 1)))
    assert size == 13 and [g.num_layers for g in groups] == [12, 13]


@pytest.mark.parametrize("bad, match", [
    (dict(layer_pattern=["sliding_window", "full"]), "positive 'sliding_window'"),
    (dict(layer_pattern=["local", "full"]), "kind 'local'"),
    (dict(kv_lora_rank=512), "both kv_lora_rank and qk_rope_head_dim"),
    (dict(quantization={"method": "int3"}), "quantization method 'int3'"),
])
def test_catalog_entries_are_checked_with_one_line_errors(bad: dict[str, object], match: str) -> None:
    base = dict(key="x", name="x", layers=4, hidden=64, heads=4, kv_heads=4, head_dim=16, ffn=128,
                vocab=100, params_b=0.001)
    with pytest.raises(ConfigError, match=match):
        ModelSpec(**{**base, **bad})  # type: ignore[arg-type]
