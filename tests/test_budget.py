"""KV budget: the numbers in specs.md, vllm-v1-semantics.md s8 and the paper's Table 1."""

from __future__ import annotations

import json

import pytest

from sim.config.schema import make_config, parse_bytes
from sim.errors import ConfigError
from sim.kv.base import cdiv
from sim.memory.budget import budget_for
from sim.model.catalog import resolve_model


def test_llama_3_1_8b_bytes_per_token_and_block() -> None:
    b = budget_for(make_config(kv_memory="50GB", max_model_len=8192))
    assert b.bytes_per_token == 131_072
    assert b.bytes_per_block == 2 * 2**20  # 2 MiB at block_size 16


def test_50GB_gives_23841_blocks_and_vllm_log_lines() -> None:
    b = budget_for(make_config(kv_memory="50GB", max_model_len=8192))
    assert b.num_gpu_blocks == 23_841
    assert b.log_lines() == [
        "GPU KV cache size: 381,456 tokens",
        "Maximum concurrency for 8,192 tokens per request: 46.56x",
    ]


def test_GB_vs_GiB_matters() -> None:
    assert parse_bytes("50GB") == 50 * 10**9
    assert budget_for(make_config(kv_memory="50GiB", max_model_len=8192)).num_gpu_blocks == 25_600


def test_a_1000_token_request_holds_63_blocks_with_8_slots_unused() -> None:
    assert cdiv(1000, 16) == 63
    assert 63 * 16 - 1000 == 8


def test_opt_13b_12GiB_is_15728_token_slots_as_in_table_1() -> None:
    cfg = make_config(model="opt-13b", gpu="a100-40gb", kv_memory="12GiB", max_model_len=2048)
    b = budget_for(cfg)
    assert b.bytes_per_token == 819_200  # the paper's "800 KB"
    assert b.available_kv_bytes // b.bytes_per_token == 15_728


def test_num_gpu_blocks_override_counts_the_null_block() -> None:
    b = budget_for(make_config(num_gpu_blocks=1000, max_model_len=4096))
    assert b.num_gpu_blocks == 1000 and b.usable_blocks == 999


def test_tensor_parallel_splits_kv_heads_and_weights() -> None:
    one = budget_for(make_config(model="llama-3.1-70b", gpu="h100", tensor_parallel_size=2, max_model_len=8192))
    four = budget_for(make_config(model="llama-3.1-70b", gpu="h100", tensor_parallel_size=4, max_model_len=8192))
    assert one.bytes_per_token == 2 * four.bytes_per_token
    assert four.num_gpu_blocks > 2 * one.num_gpu_blocks  # less weight per GPU -> more room


def test_70b_on_one_h100_is_an_impossible_config_with_a_clear_message() -> None:
    with pytest.raises(ConfigError, match="no memory left for the KV cache"):
        budget_for(make_config(model="llama-3.1-70b", gpu="h100"))


def test_pool_smaller_than_max_model_len_names_the_largest_length_that_fits() -> None:
    with pytest.raises(ConfigError, match="largest max_model_len that fits is 1584"):
        budget_for(make_config(num_gpu_blocks=100, max_model_len=8192))


def test_hf_config_json(tmp_path) -> None:
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "torch_dtype": "bfloat16", "max_position_embeddings": 131072}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = resolve_model(str(p))
    assert m.kv_bytes_per_token() == 131_072
    assert 7.5 < m.params_b < 8.5


def test_hf_config_missing_field_is_one_line(tmp_path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(ConfigError, match="no field 'num_hidden_layers'"):
        resolve_model(str(p))


@pytest.mark.parametrize("bad", ["50", "GB", "-3GB", "12 parsecs"])
def test_kv_memory_needs_units(bad: str) -> None:
    with pytest.raises(ConfigError, match="--kv-memory"):
        make_config(kv_memory=bad)
