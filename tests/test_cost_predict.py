"""``kvsim cost predict`` and its Python API: ask the step-cost model directly."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim.cost import build_cost_model
from sim.cost.predict import batch_for, predict_step
from sim.errors import ConfigError
from sim.model.catalog import resolve_gpu, resolve_model

runner = CliRunner()
cli_main._load()


def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(cli_main.app, ["cost", "predict", *args])
    return res.exit_code, res.output


def test_json_has_step_cost_model_basis_and_parts() -> None:
    code, out = kvsim("--model", "llama-2-70b", "--gpu", "a100-80gb", "--tp", "4", "--prefill-tokens", "512",
                      "--batch", "2", "--serving-stack", "vllm-2023", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert {"step_s", "cost_model", "basis", "parts"} <= set(doc)
    assert doc["basis"] == "fitted" and doc["cost_model"].startswith("calibrated (a100-80gb, tp=4")
    assert sum(doc["parts"].values()) == pytest.approx(doc["step_s"], rel=1e-9)
    lo, hi = doc["band_s"]
    assert lo < doc["step_s"] < hi
    # the same number as the cost model the simulator builds, for the same batch
    cost = build_cost_model("calibrated", resolve_model("llama-2-70b"), resolve_gpu("a100-80gb"), 4,
                            serving_stack="vllm-2023")
    assert doc["step_s"] == cost.step_time(batch_for(prefill_tokens=512, batch=2))


def test_decode_on_an_unmeasured_gpu_is_extrapolated_and_grows_with_context() -> None:
    short = predict_step("llama-3.1-8b", "h200", 1, batch=32, context=1000, decode=True)
    long = predict_step("llama-3.1-8b", "h200", 1, batch=32, context=8000, decode=True)
    assert short.basis == long.basis == "extrapolated" and short.step_s < long.step_s
    code, out = kvsim("--gpu", "h200", "--decode", "--batch", "32", "--context", "1000", "--json")
    assert code == 0 and json.loads(out)["step_s"] == short.step_s


def test_other_cost_models_and_stacks() -> None:
    roof = predict_step("llama-3.1-8b", "h100", prefill_tokens=1024, cost_model="roofline")
    assert roof.basis == "uncalibrated" and roof.parts == {"step": roof.step_s}
    lean = predict_step("opt-13b", "a100-80gb", prefill_tokens=1024, serving_stack="lean")
    vllm = predict_step("opt-13b", "a100-80gb", prefill_tokens=1024, serving_stack="vllm")
    assert lean.step_s < vllm.step_s and "lean stack" in lean.cost_model


@pytest.mark.parametrize("args, msg", [
    (("--decode", "--batch", "4"), "--decode needs --context"),
    (("--decode", "--prefill-tokens", "8", "--context", "9"), "not --prefill-tokens"),
    (("--batch", "4"), "give --prefill-tokens"),
    (("--prefill-tokens", "8", "--batch", "0"), "--batch 0"),
    (("--prefill-tokens", "8", "--gpu", "tpu"), "--gpu 'tpu'"),
    (("--prefill-tokens", "8", "--serving-stack", "tgi"), "--serving-stack 'tgi'"),
])
def test_bad_flags_are_one_line_errors(args: tuple[str, ...], msg: str) -> None:
    code, out = kvsim(*args)
    assert code == 2 and msg in out and len(out.strip().splitlines()) == 1, out


def test_batch_for_describes_the_step_like_the_engine() -> None:
    b = batch_for(prefill_tokens=100, batch=3, context=50, block_size=16)
    assert (b.prefill_tokens, b.num_prefill_seqs, b.prefill_context_tokens) == (300, 3, 450)
    assert b.prefill_attn_pairs == 3 * 100 * (50 + 101 / 2) and b.pages_touched == 3 * 10
    d = batch_for(batch=2, context=17, decode=True, block_size=16)
    assert (d.num_decode_seqs, d.decode_context_tokens, d.pages_touched) == (2, 34, 4)
    with pytest.raises(ConfigError):
        batch_for(batch=1)
