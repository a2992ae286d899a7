"""Serving stacks by engine era (issue 16): which preset gets which stack, and what each era's form does."""

from __future__ import annotations

import pytest

from sim.config.schema import make_config
from sim.cost import build_cost_model
from sim.cost.calibrated import build_calibrated
from sim.cost.predict import batch_for
from sim.cost.sources import committed_calibrations
from sim.cost.stack import ServingStack, committed_stacks, resolve_stack
from sim.model.catalog import resolve_gpu, resolve_model

H100 = resolve_gpu("h100")


def cost(model: str = "llama-2-7b", tp: int = 1, stack: str = "vllm-v1", **opts: bool):  # type: ignore[no-untyped-def]
    return build_calibrated(resolve_model(model), H100, tp, committed_calibrations(), resolve_stack(stack), **opts)


def test_presets_time_steps_with_their_engine_era_and_the_flag_overrides() -> None:
    assert make_config().serving_stack == "vllm-v1"
    assert make_config(preset="vllm-v1-legacy").serving_stack == "vllm-v1"
    assert make_config(preset="paper-v0").serving_stack == "vllm-2023"
    assert make_config(preset="paper-v0", serving_stack="lean").serving_stack == "lean"
    assert make_config(serving_stack=None).serving_stack == "vllm-v1"


def test_vllm_is_a_deprecated_alias_of_the_2023_stack() -> None:
    assert resolve_stack("vllm") == resolve_stack("vllm-2023")
    assert "vllm" not in committed_stacks()


def test_every_profile_names_its_engine_and_the_rows_it_was_fitted_on() -> None:
    stacks = committed_stacks()
    assert {"vllm-v1", "vllm-0.6", "vllm-2023", "lean", "splitwise"} <= set(stacks)
    for s in stacks.values():
        assert s.engine and s.source and s.gpu, s.name
        assert s.band.optimistic <= 0 <= s.band.pessimistic
    assert "v0.15.1" in stacks["vllm-v1"].engine and stacks["vllm-v1"].gpu == "h100"
    assert "0.6" in stacks["vllm-0.6"].engine and "llm-inference-bench" in stacks["vllm-0.6"].source


def test_cuda_graph_stack_has_a_launch_floor_only_under_enforce_eager() -> None:
    b = batch_for(batch=1, context=200, decode=True)
    graphs, eager = cost(), cost(enforce_eager=True)
    st = resolve_stack("vllm-v1")
    assert st.cuda_graphs and st.launch_floor(False) == 0.0
    assert eager.step_time(b) > graphs.step_time(b)
    assert eager.step_time(b) >= resolve_model("llama-2-7b").layers * st.launch_s
    # an eager-era stack is launch-bound whatever the flag says
    old = cost(stack="vllm-2023")
    assert old.step_time(b) == cost(stack="vllm-2023", enforce_eager=True).step_time(b)


def test_scheduler_cpu_is_hidden_under_async_scheduling_and_paid_without() -> None:
    st = resolve_stack("vllm-v1")
    b = batch_for(batch=32, context=500, decode=True)
    on, off = cost(async_scheduling=True), cost(async_scheduling=False)
    assert off.step_time(b) == pytest.approx(on.step_time(b) + st.sched_s + st.sched_per_seq_s * 32, rel=1e-12)
    for c in (on, off):
        assert sum(c.parts(b).values()) == pytest.approx(c.step_time(b), rel=1e-12)


def test_v1_steps_get_faster_with_tp_on_nvlink_the_2023_stack_did_not() -> None:
    b = batch_for(batch=16, context=600, decode=True)
    v1 = [cost("codellama-34b", tp).step_time(b) for tp in (1, 2, 4)]
    assert v1[0] > v1[1] > v1[2]
    parts = cost("codellama-34b", 2).parts(b)
    assert parts["cpu_step"] < 5e-3  # no Ray term at TP 2


def test_squared_prefill_term_is_per_sequence_not_per_step() -> None:
    st = ServingStack("t", "", 0.0, 0.0, 0.0, 1e-9, ((1, 0.0),), ((1, 1.0),))
    c = build_calibrated(resolve_model("llama-2-7b"), H100, 1, committed_calibrations(), st)
    one, four = batch_for(prefill_tokens=2048, batch=1), batch_for(prefill_tokens=512, batch=4)
    assert c.parts(one)["prefill_overhead"] == pytest.approx(1e-9 * 2048**2)
    assert c.parts(four)["prefill_overhead"] == pytest.approx(1e-9 * 4 * 512**2)   # a quarter, not the same


def test_no_step_is_faster_than_the_gpu_can_compute_it() -> None:
    m = resolve_model("llama-2-7b")
    for stack in ("vllm-v1", "vllm-0.6"):
        c = cost(stack=stack)
        for p in (512, 2048, 8192):
            b = batch_for(prefill_tokens=p, batch=1)
            assert c.step_time(b) >= 2 * m.params_b * 1e9 * p / H100.flops


def test_a_profile_yaml_can_be_named_as_the_serving_stack(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from calibration.v1_fit import Layout, stack_entry, write_profile
    lay = Layout([1])
    p = write_profile(tmp_path / "mine.yaml", "mine", stack_entry(
        lay, np.r_[lay.x0()], description="d", engine="my vLLM", fitted_on={"source": "s", "gpu": "h100"}))
    c = build_cost_model("calibrated", resolve_model("llama-2-7b"), H100, 1, serving_stack=str(p))
    assert "mine" in c.name
