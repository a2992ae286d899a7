"""Quiet steps of the fast-forward window (sim/engine/fastforward/window.py): steps in which
nothing finishes, nothing is freed and no admission can run skip the admission pass and are
timed by the cost model's decode-only function (sim/cost/bulk.py). Each configuration below
makes them fire for a different reason -- a hopeless waiting head while free blocks shrink,
nothing waiting until an arrival is due, a full running list -- and each run must equal
``--exact-steps`` frame for frame."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sim.config.schema import make_config
from sim.cost import StepBatch, build_cost_model
from sim.cost.bulk import DecodeTimes, decode_step_terms, decode_step_time
from sim.engine.step import StepKernel
from sim.model.catalog import resolve_gpu, resolve_model
from tests.helpers import assert_fast_forward_identical, mooncake_slice


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch) -> list[StepKernel]:
    """Every StepKernel built during the test, in order (the fast-forward run's comes first)."""
    built: list[StepKernel] = []
    init = StepKernel.__post_init__

    def record(self: StepKernel) -> None:
        init(self)
        built.append(self)

    monkeypatch.setattr(StepKernel, "__post_init__", record)
    return built


QUIET = {
    "hopeless head (pool-limited)": {"num_gpu_blocks": 900, "max_model_len": 8192},
    "nothing waiting, arrivals mid-window": {"num_gpu_blocks": 20000, "max_model_len": 8192},
    "running list full": {"num_gpu_blocks": 20000, "max_num_seqs": 6, "max_model_len": 8192},
    "priority queue (an arrival may become the head)": {"num_gpu_blocks": 900, "policy": "priority",
                                                        "max_model_len": 8192},
    "block size 4, small batch": {"num_gpu_blocks": 1200, "block_size": 4, "max_num_seqs": 16,
                                  "max_model_len": 2048},
    "swap preemption": {"num_gpu_blocks": 700, "preemption": "swap", "swap_space": 0.5, "max_model_len": 8192},
    "slab allocator": {"allocator": "slab", "reservation": "pow2", "model": "opt-13b", "gpu": "a100-40gb",
                       "kv_memory": "12GiB", "max_model_len": 2048},
    "roofline cost": {"num_gpu_blocks": 900, "max_model_len": 8192, "cost_model": "roofline"},
    "constant cost": {"num_gpu_blocks": 900, "max_model_len": 8192, "cost_model": "constant:0.01"},
}


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize("kw", list(QUIET.values()), ids=list(QUIET))
def test_quiet_steps_fire_and_equal_exact_steps(bundled_trace: Any, kernels: list[StepKernel],
                                                kw: dict[str, Any], async_scheduling: bool) -> None:
    kw = {**kw, "async_scheduling": async_scheduling}
    ff = assert_fast_forward_identical(kw, bundled_trace, check=kw.get("num_gpu_blocks", 0) <= 1200)
    k = kernels[0]  # the fast-forward run
    assert k.ff_steps == ff.summary.fast_forward_steps
    assert k.bulk_steps > 0.2 * len(ff.steps), "quiet steps did not fire"
    assert all(x.bulk_steps == 0 for x in kernels[1:])  # --exact-steps runs never take them


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
def test_quiet_steps_with_prefix_sharing_on_mooncake(kernels: list[StepKernel], async_scheduling: bool) -> None:
    kw = dict(gpu="h200", num_gpu_blocks=1500, max_model_len=8192, async_scheduling=async_scheduling)
    ff = assert_fast_forward_identical(kw, mooncake_slice(), check=True)
    assert ff.summary.prefix_cache.hit_rate > 0.05
    assert kernels[0].bulk_steps > 0


CALIBRATED = {  # every serving stack, async scheduling on and off, eager, a MoE model
    "vllm-v1 async": dict(serving_stack="vllm-v1"),
    "vllm-v1 sync": dict(serving_stack="vllm-v1", async_scheduling=False),
    "vllm-v1 eager": dict(serving_stack="vllm-v1", enforce_eager=True),
    "vllm-0.6": dict(serving_stack="vllm-0.6"),
    "vllm-2023": dict(serving_stack="vllm-2023", async_scheduling=False),
    "lean": dict(serving_stack="lean"),
    "mixtral (MoE)": dict(model="mixtral-8x7b", gpu="h100"),
}


@pytest.mark.parametrize("spec", ["calibrated", "roofline", "constant:0.02", *[f"calibrated/{k}" for k in CALIBRATED]])
@pytest.mark.parametrize("block_size", [16, 4, 0])
def test_decode_step_time_equals_step_time_bit_for_bit(spec: str, block_size: int) -> None:
    """The folded decode-only function returns the very float ``step_time`` returns."""
    kind, _, variant = spec.partition("/")
    kw: dict[str, Any] = dict(CALIBRATED.get(variant, {}))
    model, gpu = resolve_model(kw.pop("model", "llama-2-70b")), resolve_gpu(kw.pop("gpu", "a100-80gb"))
    cost = build_cost_model(kind, model, gpu, 2, **kw)
    spec = kind
    folded = spec == "calibrated" or spec.startswith("constant")  # models with DecodeTerms
    assert isinstance(cost, DecodeTimes) == folded
    rng = random.Random(7)
    for seqs in (1, 2, 7, 64, 128, 255):
        time = decode_step_time(cost, seqs, block_size, 327680)
        assert (decode_step_terms(cost, seqs, block_size) is not None) == folded
        for _ in range(200):
            ctx = rng.randrange(seqs, seqs * 4096 + 1)
            pages = -(-ctx // block_size) + rng.randrange(0, seqs + 1) if block_size else 0
            exact = cost.step_time(StepBatch(num_decode_seqs=seqs, decode_context_tokens=ctx, pages_touched=pages,
                                             block_size=block_size, block_bytes=327680))
            assert time(ctx, pages) == exact, (seqs, ctx, pages)


def test_kernel_builds_the_decode_function_once_per_decoder_count() -> None:
    from sim.run.build import build

    parts = build(make_config(num_gpu_blocks=900, max_model_len=8192))
    k = StepKernel(parts.sched, parts.kv, parts.cost, block_bytes=parts.budget.bytes_per_block)
    assert k.decode_time(12) is k.decode_time(12)
    assert k.decode_time(12) is not k.decode_time(13)


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize("name", ["hopeless head (pool-limited)", "running list full",
                                  "priority queue (an arrival may become the head)", "block size 4, small batch"])
def test_skipped_admission_passes_leave_the_exact_margins(bundled_trace: Any, kernels: list[StepKernel],
                                                          name: str, async_scheduling: bool) -> None:
    """Quiet steps skip the admission pass, and so do the steps that are not quiet after them
    while no arrival was pulled and no blocks were freed after a pass (window.py). Each capacity
    test a skipped pass would make goes the way the last one made did, with a slack no nearer to
    flipping (free blocks only fell, the head and the running list stayed), so the margins a sweep
    derives runs by (sim/kv/margin.py) are the exact loop's, both sides of each."""
    assert_fast_forward_identical({**QUIET[name], "async_scheduling": async_scheduling}, bundled_trace)
    ff, ex = kernels[0], kernels[1]
    assert ff.bulk_steps > 0 and ex.bulk_steps == 0
    for margin in (lambda k: k.kv.headroom, lambda k: k.sched.seq_margin):
        a, b = margin(ff), margin(ex)
        assert (a.fail_max, a.pass_min) == (b.fail_max, b.pass_min)
    assert ex.kv.headroom.fail_max > -(1 << 60) or ex.sched.seq_margin.fail_max > -(1 << 60), \
        "no capacity test failed: the test proves nothing"
