"""Mixture-of-experts models are timed as MoE (issue 16): experts touched, top-k compute, router."""

from __future__ import annotations

import dataclasses

import pytest

from sim.cost.calibrated import build_calibrated
from sim.cost.moe import distinct_experts, moe_inactive_params
from sim.cost.predict import batch_for
from sim.cost.sources import committed_calibrations
from sim.cost.stack import resolve_stack
from sim.model.catalog import resolve_gpu, resolve_model

H100 = resolve_gpu("h100")


def kernel(model, tp: int = 1, **opts: bool):  # type: ignore[no-untyped-def]
    return build_calibrated(model, H100, tp, committed_calibrations(), resolve_stack("vllm-v1"), **opts)


def test_expected_distinct_experts_for_top_k_routing() -> None:
    assert distinct_experts(1, 8, 2) == pytest.approx(2.0)
    assert distinct_experts(2, 8, 2) == pytest.approx(8 * (1 - 0.75**2))       # 3.5
    assert distinct_experts(1000, 8, 2) == pytest.approx(8.0)
    assert distinct_experts(0, 8, 2) == 0.0


@pytest.mark.parametrize("key, experts, k", [("mixtral-8x7b", 8, 2), ("gpt-oss-20b", 32, 4), ("gpt-oss-120b", 128, 4),
                                             ("deepseek-v3", 256, 8)])
def test_catalog_moe_models_carry_their_routing(key: str, experts: int, k: int) -> None:
    m = resolve_model(key)
    assert m.is_moe and m.num_experts == experts and m.experts_per_token == k and m.expert_ffn > 0
    assert not resolve_model("llama-3.1-8b").is_moe
    assert resolve_model("deepseek-v3").dense_layers == 3 and resolve_model("deepseek-v3").shared_experts == 1


def test_decode_reads_only_the_experts_its_tokens_touch() -> None:
    mix = resolve_model("mixtral-8x7b")
    dense = dataclasses.replace(mix, num_experts=0, experts_per_token=0, ffn=8 * mix.ffn)  # all experts every token
    moe_c, dense_c = kernel(mix, 2), kernel(dense, 2)
    one = batch_for(batch=1, context=500, decode=True)
    assert moe_c.gpu_time(one) < 0.5 * dense_c.gpu_time(one)         # 2 of 8 experts read
    # a large batch touches every expert: the weights read approach the dense model's
    big = batch_for(batch=256, context=500, decode=True)
    assert moe_c.gpu_time(big) / dense_c.gpu_time(big) > moe_c.gpu_time(one) / dense_c.gpu_time(one)


def test_prefill_computes_top_k_experts_per_token() -> None:
    mix = resolve_model("mixtral-8x7b")
    top2 = dataclasses.replace(mix, num_experts=0, experts_per_token=0, ffn=2 * mix.ffn)  # 2 experts' compute
    p = batch_for(prefill_tokens=4096, batch=1)
    assert kernel(mix, 2).gpu_time(p) == pytest.approx(kernel(top2, 2).gpu_time(p), rel=0.25)
    assert moe_inactive_params(mix) == pytest.approx(32 * 6 * 3 * 4096 * 14336)


def test_expert_parallel_keeps_bytes_and_flops_per_gpu() -> None:
    mix = resolve_model("mixtral-8x7b")
    b = batch_for(batch=16, context=500, decode=True)
    tp, ep = kernel(mix, 4).gpu_time(b), kernel(mix, 4, expert_parallel=True).gpu_time(b)
    assert ep == pytest.approx(tp, rel=0.2) and ep != tp


def test_a_moe_config_json_takes_the_moe_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from sim.model.catalog import model_from_hf_config
    cfg = {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8,
           "num_experts_per_tok": 2, "torch_dtype": "bfloat16", "max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = model_from_hf_config(tmp_path / "config.json")
    assert m.is_moe and (m.num_experts, m.experts_per_token, m.expert_ffn) == (8, 2, 14336)
    assert 46 < m.params_b < 47.5
