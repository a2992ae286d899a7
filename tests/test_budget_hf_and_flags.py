"""A Hugging Face config.json's shapes and quantization, and vLLM's own flag spellings (issue 11 item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sim.cli.options import build_config
from sim.config.schema import make_config, parse_bytes
from sim.errors import ConfigError
from sim.memory.budget import FP8_LOG_LINE, budget_for
from sim.model.catalog import resolve_model

GiB = 2**30

DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 config.json (the fields kvsim reads)
    "model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
    "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]}}
GPT_OSS_120B = {  # openai/gpt-oss-120b config.json
    "model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880, "intermediate_size": 2880,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128,
    "num_experts_per_tok": 4, "sliding_window": 128, "vocab_size": 201088, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "layer_types": ["sliding_attention", "full_attention"] * 18,
    "quantization_config": {"quant_method": "mxfp4"}, "torch_dtype": "bfloat16"}
GEMMA_3_27B = {  # google/gemma-3-27b-it config.json: the language model sits under text_config
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
    "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                    "sliding_window": 1024, "sliding_window_pattern": 6, "vocab_size": 262208,
                    "max_position_embeddings": 131072}}
LLAMA_4_SCOUT = {  # meta-llama/Llama-4-Scout-17B-16E config.json (no_rope_layer_interval left at its default 4)
    "model_type": "llama4", "torch_dtype": "bfloat16",
    "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "vocab_size": 202048, "num_local_experts": 16,
                    "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
                    "max_position_embeddings": 10485760}}
TINY = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000, "torch_dtype": "float16"}


def write(tmp_path: Path, cfg: dict[str, Any], name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


# ------------------------------------------------------------------ config.json shapes

def test_deepseek_v3_config_is_mla_with_moe_parameters_and_fp8_weights(tmp_path: Path) -> None:
    m = resolve_model(write(tmp_path, DEEPSEEK_V3))
    assert (m.kv_lora_rank, m.qk_rope_head_dim, m.head_dim) == (512, 64, 128 + 64)
    assert m.kv_bytes_per_token(tp=8) == 61 * 576 * 2
    assert 670 < m.params_b < 672                       # the paper's 671B; a dense estimate would say ~62B
    assert m.quantization is not None and m.quantization.method == "fp8"
    embed = 2 * 129_280 * 7_168
    assert m.weight_bytes == pytest.approx(embed * 2 + (m.params_b * 1e9 - embed), abs=1024)


def test_gpt_oss_config_quantizes_only_the_experts(tmp_path: Path) -> None:
    m = resolve_model(write(tmp_path, GPT_OSS_120B))
    experts = 36 * 128 * 3 * 2880 * 2880                 # layers x experts x (gate, up, down)
    assert m.quantization is not None and m.quantization.quantized_params_b == pytest.approx(experts / 1e9)
    assert [(g.kind, g.num_layers, g.window) for g in m.attention_groups()] == [
        ("sliding_window", 18, 128), ("full", 18, None)]
    assert 60.5 < m.weight_bytes / GiB < 60.9                                   # model card: 60.8 GiB


def test_multimodal_configs_read_their_text_config(tmp_path: Path) -> None:
    gemma = resolve_model(write(tmp_path, GEMMA_3_27B, "gemma.json"))
    assert (gemma.layers, gemma.kv_heads) == (62, 16)
    assert [(g.kind, g.num_layers, g.window) for g in gemma.attention_groups()] == [
        ("sliding_window", 52, 1024), ("full", 10, None)]
    scout = resolve_model(write(tmp_path, LLAMA_4_SCOUT, "scout.json"))
    assert [(g.kind, g.num_layers, g.window) for g in scout.attention_groups()] == [
        ("chunked_local", 36, 8192), ("full", 12, None)]


@pytest.mark.parametrize("extra, kinds", [
    ({"sliding_window": 4096}, [("sliding_window", 2)]),                           # Mistral-7B-v0.1
    ({"sliding_window": 131072, "use_sliding_window": False}, [("full", 2)]),      # Qwen2 configs
    ({"sliding_window": None}, [("full", 2)]),
    ({"sliding_window": 4096, "model_type": "gemma2"}, [("sliding_window", 1), ("full", 1)]),
    ({"attention_chunk_size": 8192, "no_rope_layers": [0, 1]}, [("full", 1), ("chunked_local", 1)]),
])
def test_sliding_window_rules_of_hf_configs(tmp_path: Path, extra: dict[str, Any],
                                            kinds: list[tuple[str, int]]) -> None:
    m = resolve_model(write(tmp_path, {**TINY, **extra}))
    assert [(g.kind, g.num_layers) for g in m.attention_groups()] == kinds


def test_awq_int4_weights_by_hand(tmp_path: Path) -> None:
    # 2 layers x (attention 256*4*64*2 + 256*2*64*2 = 196,608; gated MLP 3*256*512 = 393,216) = 1,179,648
    # quantized at 4 + (16 + 4)/128 = 4.15625 bits; embeddings 2 * 1000 * 256 = 512,000 stay fp16
    q = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    m = resolve_model(write(tmp_path, {**TINY, "quantization_config": q}))
    assert m.weight_bytes == 1_179_648 * 4.15625 / 8 + 512_000 * 2 == 1_636_864
    g = resolve_model(write(tmp_path, {**TINY, "quantization_config": {**q, "quant_method": "gptq"}}, "g.json"))
    assert g.weight_bytes == 1_636_864
    f = resolve_model(write(tmp_path, {**TINY, "quantization_config": {"quant_method": "fp8"}}, "f.json"))
    assert f.weight_bytes == 1_179_648 * 1 + 512_000 * 2 == 2_203_648
    assert resolve_model(write(tmp_path, TINY, "plain.json")).weight_bytes == (1_179_648 + 512_000) * 2


@pytest.mark.parametrize("cfg, match", [
    ({**TINY, "quantization_config": {"quant_method": "bitsandbytes"}}, "quant_method' = 'bitsandbytes'"),
    ({**TINY, "quantization_config": {"bits": 4}}, "no 'quant_method'"),
    ({**TINY, "layer_types": ["full_attention"]}, "'layer_types' must list"),
    ({**TINY, "kv_lora_rank": "big", "qk_rope_head_dim": 64}, "'kv_lora_rank' = 'big'"),
])
def test_bad_hf_fields_are_one_line_errors_naming_the_file(tmp_path: Path, cfg: dict[str, Any], match: str) -> None:
    path = write(tmp_path, cfg)
    with pytest.raises(ConfigError, match=match) as e:
        resolve_model(path)
    assert path in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ vLLM's flag spellings

def test_num_gpu_blocks_override_is_num_gpu_blocks() -> None:
    assert make_config(num_gpu_blocks_override=1000).num_gpu_blocks == 1000
    b = budget_for(make_config(num_gpu_blocks_override=1000, max_model_len=4096))
    assert b.num_gpu_blocks == 1000 and b.usable_blocks == 999


@pytest.mark.parametrize("value, nbytes", [
    (53_687_091_200, 53_687_091_200), ("53687091200", 53_687_091_200),
    ("50g", 50 * 10**9), ("50G", 50 * GiB), ("25.6k", 25_600), ("50GB", 50 * 10**9), ("50GiB", 50 * GiB),
])
def test_kv_cache_memory_bytes_parses_like_vllm(value: object, nbytes: int) -> None:
    assert parse_bytes(make_config(kv_cache_memory_bytes=value).kv_memory or "") == nbytes
    if nbytes > GiB:
        b = budget_for(make_config(kv_cache_memory_bytes=value, max_model_len=2048))
        assert b.available_kv_bytes == nbytes and b.source == "--kv-memory"


@pytest.mark.parametrize("bad", ["1.5G", "lots", -3, True])
def test_bad_kv_cache_memory_bytes_is_one_line(bad: object) -> None:
    with pytest.raises(ConfigError, match="--kv-cache-memory-bytes"):
        make_config(kv_cache_memory_bytes=bad)


def test_both_spellings_at_once_is_an_error_but_a_flag_beats_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="same setting"):
        make_config(kv_memory="10GB", kv_cache_memory_bytes="20g")
    f = tmp_path / "c.yaml"
    f.write_text("kv_cache_memory_bytes: 20g\nnum_gpu_blocks_override: 500\nkv_cache_dtype: fp8\n")
    from_file = build_config(f)
    assert (from_file.kv_memory, from_file.num_gpu_blocks, from_file.kv_cache_dtype) == ("20000000000B", 500, "fp8")
    assert build_config(f, kv_memory="10GB").kv_memory == "10GB"
    assert build_config(f, num_gpu_blocks=700).num_gpu_blocks == 700


def kvsim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sim.cli.main", *args], capture_output=True, text=True, timeout=300)


def test_budget_cli_takes_vllms_spellings_and_prints_the_fp8_line() -> None:
    p = kvsim("budget", "--kv-cache-dtype", "fp8", "--kv-cache-memory-bytes", "50000000000",
              "--max-model-len", "8192", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["num_gpu_blocks"] == 47_683 and d["log_lines"][0] == FP8_LOG_LINE
    p = kvsim("budget", "--num-gpu-blocks-override", "1000", "--max-model-len", "4096", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["num_gpu_blocks"] == 1000
    p = kvsim("budget", "--kv-cache-dtype", "int8")
    assert p.returncode != 0 and "--kv-cache-dtype 'int8'" in p.stderr and "Traceback" not in p.stderr
