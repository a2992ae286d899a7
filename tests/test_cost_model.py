"""The calibrated step-cost model (the default): its form, the gated-MLP fix, its basis and band."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from sim.config.schema import make_config
from sim.cost import basis_of, build_cost_model
from sim.cost.calibrated import build_calibrated
from sim.cost.features import GEMM_TERMS, gemm_features, predict
from sim.cost.predict import batch_for
from sim.cost.scaled import ScaledCost
from sim.cost.sources import committed_calibrations
from sim.cost.stack import ServingStack, committed_stacks, resolve_stack
from sim.errors import ConfigError
from sim.model.catalog import model_from_hf_config, resolve_gpu, resolve_model
from sim.model.mlp import gated_mlp

A100, H100 = resolve_gpu("a100-80gb"), resolve_gpu("h100")
DECODE = batch_for(batch=8, context=1000, decode=True)
PREFILL = batch_for(prefill_tokens=2048, batch=1)


def stack(**kw: object) -> ServingStack:
    base = dict(name="t", description="", launch_s=0.0, per_seq_s=0.0, prefill_s=0.0, prefill_n2_s=0.0,
                cpu_s=((1, 0.0),), eta=((1, 1.0),))
    return ServingStack(**{**base, **kw})  # type: ignore[arg-type]


def cost(model: str = "llama-3.1-8b", gpu=A100, tp: int = 1, st: ServingStack | None = None):  # type: ignore[no-untyped-def]
    return build_calibrated(resolve_model(model), gpu, tp, committed_calibrations(), st or stack())


# --------------------------------------------------------------------------- gated MLP (the OPT bug)

@pytest.mark.parametrize("cfg, gated", [
    ({"model_type": "llama", "hidden_act": "silu"}, True),
    ({"model_type": "qwen2", "hidden_act": "silu"}, True),
    ({"model_type": "gemma", "hidden_act": "gelu_pytorch_tanh"}, True),   # gated although GELU
    ({"model_type": "opt", "activation_function": "relu", "ffn_dim": 20480}, False),
    ({"model_type": "bloom"}, False),
    ({"model_type": "gpt_neox", "hidden_act": "gelu"}, False),            # not gated although hidden_act
    ({"architectures": ["OPTForCausalLM"]}, False),
    ({"model_type": "somenew", "activation_function": "gelu_new"}, False),
    ({"model_type": "somenew", "hidden_act": "silu"}, True),
])
def test_gated_mlp_is_read_from_the_hf_config(cfg: dict[str, object], gated: bool) -> None:
    assert gated_mlp(cfg) is gated


def test_opt_config_json_is_not_gated_and_counts_two_mlp_matrices(tmp_path: Path) -> None:
    opt = {"model_type": "opt", "architectures": ["OPTForCausalLM"], "num_hidden_layers": 40, "hidden_size": 5120,
           "num_attention_heads": 40, "ffn_dim": 20480, "vocab_size": 50272, "activation_function": "relu",
           "torch_dtype": "float16", "max_position_embeddings": 2048}
    (tmp_path / "config.json").write_text(json.dumps(opt))
    m = model_from_hf_config(tmp_path / "config.json")
    assert m.gated_mlp is False
    # 40 x (4 h^2 attention + 2 h ffn MLP) + 2 x vocab x h = 12.85 B (a gated count would say 17.0 B)
    assert m.params_b == pytest.approx((40 * (4 * 5120**2 + 2 * 5120 * 20480) + 2 * 50272 * 5120) / 1e9)
    assert resolve_model("opt-13b").gated_mlp is False and resolve_model("llama-3.1-8b").gated_mlp is True


def test_opt_up_projection_is_ffn_wide_not_two_ffn() -> None:
    """The pre-issue-10 model timed OPT's up projection as gate+up (2 x ffn): 20-27 % slow steps."""
    opt = resolve_model("opt-13b")
    fixed, bug = cost("opt-13b"), build_calibrated(dataclasses.replace(opt, gated_mlp=True), A100, 1,
                                                   committed_calibrations(), stack())
    g = next(s for s in committed_calibrations() if s.gpu == "a100-80gb" and "gemm" in s.doc).doc["gemm"]["coef"]
    n = DECODE.num_tokens

    def up(width: int) -> float:
        x = gemm_features(n, opt.hidden, width, bandwidth_bps=A100.bandwidth_bps, flops=A100.flops)
        return float(predict(g, GEMM_TERMS, x))

    extra = opt.layers * (up(2 * opt.ffn) - up(opt.ffn))
    assert bug.gpu_time(DECODE) - fixed.gpu_time(DECODE) == pytest.approx(extra, rel=1e-9)
    assert bug.gpu_time(DECODE) / fixed.gpu_time(DECODE) > 1.15


# --------------------------------------------------------------------------- the stack terms

def test_step_is_gpu_times_eta_or_the_launch_floor_plus_cpu_terms() -> None:
    gpu_only = cost().gpu_time(PREFILL)
    st = stack(per_seq_s=1e-4, prefill_s=2e-3, prefill_n2_s=1e-10, cpu_s=((1, 3e-3),), eta=((1, 1.25),))
    t = cost(st=st).step_time(PREFILL)
    assert t == pytest.approx(1.25 * gpu_only + 3e-3 + 1e-4 + 2e-3 + 1e-10 * 2048**2, rel=1e-12)
    # launch-bound: a floor of 32 layers x 1 ms exceeds the decode's kernels, so batch size stops mattering
    slow = cost(st=stack(launch_s=1e-3))
    small, big = batch_for(batch=1, context=500, decode=True), batch_for(batch=16, context=500, decode=True)
    assert slow.step_time(small) == slow.step_time(big) == pytest.approx(32e-3)
    assert cost().step_time(small) < cost().step_time(big) < 32e-3


def test_a_prefill_only_step_is_looked_up_as_the_same_float_and_others_are_computed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from sim.cost import calibrated

    monkeypatch.setattr(calibrated, "PREFILLS_KEPT", 4)  # a small memory: it forgets, then fills again
    st = resolve_stack("vllm")
    c, fresh = cost(tp=2, st=st), cost(tp=2, st=st)
    prefills = [batch_for(prefill_tokens=n, batch=k) for n in (1, 17, 512, 2048) for k in (1, 3)]
    others = [DECODE, PREFILL._replace(num_decode_seqs=4, decode_context_tokens=4000, pages_touched=252)]
    compute, computed = calibrated.CalibratedCost._step_time, []
    monkeypatch.setattr(calibrated.CalibratedCost, "_step_time",
                        lambda self, b: computed.append(b) or compute(self, b))
    for _ in range(2):
        for b in prefills[:4] + others:
            assert c.step_time(b) == compute(fresh, b)
    assert computed == prefills[:4] + others + others  # each prefill once, the mixed ones every time
    for b in prefills:  # past the memory's size: every value is still the computed one
        assert c.step_time(b) == compute(fresh, b)


def test_parts_add_up_to_the_step() -> None:
    c = cost(tp=2, st=resolve_stack("vllm"))
    for b in (DECODE, PREFILL, batch_for(batch=64, context=3000, decode=True)):
        assert sum(c.parts(b).values()) == pytest.approx(c.step_time(b), rel=1e-12)


def test_stack_values_between_fitted_tps_are_interpolated_in_log2_tp() -> None:
    st = stack(cpu_s=((2, 4e-3), (8, 10e-3)), eta=((2, 1.0), (8, 1.6)))
    assert st.at_tp(4) == pytest.approx((7e-3, 1.3))            # halfway in log2 between 2 and 8
    assert st.at_tp(1) == st.at_tp(2) and st.at_tp(16) == st.at_tp(8)  # clamped outside


def test_committed_stacks_have_a_band_and_vllm_v1_is_the_default() -> None:
    stacks = committed_stacks()
    assert {"vllm-v1", "vllm-0.6", "vllm-2023", "lean", "splitwise"} <= set(stacks)
    for s in stacks.values():
        b = s.band
        assert b.optimistic <= 0 <= b.pessimistic <= b.pessimistic_extrapolated
        assert s.gpu and s.source
    for name in ("vllm-2023", "lean", "splitwise"):
        assert stacks[name].gpu == "a100-80gb"
    assert make_config().cost_model == "calibrated" and make_config().serving_stack == "vllm-v1"
    with pytest.raises(ConfigError, match="--serving-stack 'tgi'"):
        build_cost_model("calibrated", resolve_model("llama-3.1-8b"), A100, 1, serving_stack="tgi")


# --------------------------------------------------------------------------- basis

def test_basis_is_fitted_only_where_measurements_exist() -> None:
    m = resolve_model("llama-3.1-8b")
    on = {(g.key, tp): basis_of(build_cost_model("calibrated", m, g, tp, serving_stack="vllm-2023"))
          for g, tp in ((A100, 1), (A100, 2), (A100, 8), (A100, 16), (H100, 1), (resolve_gpu("l40s"), 1))}
    assert on[("a100-80gb", 1)].basis == on[("a100-80gb", 2)].basis == on[("a100-80gb", 8)].basis == "fitted"
    assert on[("a100-80gb", 16)].basis == "extrapolated"    # no all-reduce or stack data at TP 16
    assert on[("h100", 1)].basis == "extrapolated"           # no H100 attention profile: scaled from A100
    assert "attention: extrapolated from vidur profiles a100" in on[("h100", 1)].detail
    assert on[("l40s", 1)].basis == "extrapolated"
    fitted, extra = on[("a100-80gb", 1)].band, on[("h100", 1)].band
    assert extra[1] >= fitted[1] > 0                          # extrapolation widens the band
    assert basis_of(build_cost_model("roofline", m, A100, 1)).basis == "uncalibrated"
    assert basis_of(build_cost_model("constant:0.01", m, A100, 1)).basis == "exact"


def test_a_harness_fit_of_your_gpu_makes_it_fitted(tmp_path: Path) -> None:
    """Item 6: run_gpu.py + kvsim calibrate fit on an H200 -> its own attention and GEMM terms; the
    public elementwise / all-reduce / stack terms fill in, and TP 1 on that GPU becomes fitted."""
    a100 = next(s for s in committed_calibrations() if s.gpu == "a100-80gb").doc
    own = {"schema": "kvsim-calibration/1", "gpu": "h200", "source": "measured", "label": "h200, measured",
           "attention": {"paged": a100["attention"]["paged"]}, "gemm": a100["gemm"]}
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(own))
    m, h200 = resolve_model("llama-3.1-8b"), resolve_gpu("h200")
    tp1 = build_cost_model("calibrated", m, h200, 1, path)
    assert basis_of(tp1).basis == "fitted" and "attention: h200, measured" in basis_of(tp1).detail
    assert "elementwise: extrapolated from vidur profiles h100" in basis_of(tp1).detail
    tp2 = build_cost_model("calibrated", m, h200, 2, path)
    assert basis_of(tp2).basis == "extrapolated" and "nvlink ratio" in basis_of(tp2).detail


# --------------------------------------------------------------------------- engine use

def test_step_time_scale_multiplies_every_step() -> None:
    base = build_cost_model("calibrated", resolve_model("llama-3.1-8b"), A100, 1)
    slow = ScaledCost(base, 1.2)
    assert slow.step_time(DECODE) == pytest.approx(1.2 * base.step_time(DECODE))
    assert basis_of(slow).band == basis_of(base).band and "x 1.2" in slow.name


def test_fast_forward_stays_bit_identical_under_the_calibrated_model(bundled_trace) -> None:  # type: ignore[no-untyped-def]
    from sim.run.simulate import simulate

    kw = dict(cost_model="calibrated", gpu="h100", tensor_parallel_size=2, max_model_len=8192)  # vllm-v1: fitted on H100
    ff = simulate(make_config(**kw), bundled_trace)
    ex = simulate(make_config(exact_steps=True, **kw), bundled_trace)
    assert ff.requests.equals(ex.requests) and ff.steps.equals(ex.steps)
    # the model is fitted on H100 at TP 2, but this trace's contexts run past the fitted regime
    assert ff.summary.cost_basis == "extrapolated" and "context p95" in ff.summary.cost_basis_detail
