"""Engine and V1 scheduler behaviour: step timing, preemption, fast-forward identity, accounting."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.config.schema import make_config
from sim.io.records import STEP_DTYPE, StepLog
from sim.io.results import MEM_CATS
from sim.run.simulate import simulate
from tests.conftest import make_trace
from tests.helpers import assert_fast_forward_identical, mooncake_slice


def run(rows, check: bool = True, **kw):
    kw.setdefault("cost_model", "constant:0.5")
    kw.setdefault("api_server_count", 0)  # engine-side arrivals: no front-end in between
    if "num_gpu_blocks" in kw:  # the pool must hold one max_model_len request (vLLM's startup check)
        kw.setdefault("max_model_len", min(4096, (kw["num_gpu_blocks"] - 1) * kw.get("block_size", 16)))
    kw.setdefault("max_model_len", 4096)
    return simulate(make_config(**kw), make_trace(rows), check=check)


def test_constant_cost_step_k_starts_at_k_times_seconds() -> None:
    """One request, prompt 10, output 3: prefill step 0 samples token 1, steps 1-2 decode."""
    res = run([{"arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 3}], num_gpu_blocks=64)
    steps = res.steps
    assert steps["start_s"].tolist() == [0.0, 0.5, 1.0]
    assert steps["prefill_tokens"].tolist() == [10, 0, 0]
    assert steps["decode_tokens"].tolist() == [0, 1, 1]
    r = res.requests.iloc[0]
    assert (r.first_scheduled_step, r.finish_step) == (0, 2)
    assert (r.first_token_s, r.finish_s) == (0.5, 1.5)
    assert r.tpot_s == pytest.approx(0.5)


def test_idle_engine_waits_for_the_next_arrival_without_polling() -> None:
    res = run([{"arrival_s": 0.0, "prompt_tokens": 4, "output_tokens": 1},
               {"arrival_s": 10.0, "prompt_tokens": 4, "output_tokens": 1}], num_gpu_blocks=64)
    assert res.steps["start_s"].tolist() == [0.0, 10.0]
    assert res.requests["first_scheduled_step"].tolist() == [0, 1]


def test_chunked_prefill_respects_max_num_batched_tokens() -> None:
    res = run([{"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 2}],
              num_gpu_blocks=64, max_num_batched_tokens=32, max_num_seqs=4)
    assert res.steps["prefill_tokens"].tolist()[:4] == [32, 32, 32, 4]
    assert res.requests.iloc[0].first_token_s == pytest.approx(4 * 0.5)


def test_max_num_seqs_caps_the_batch() -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 4, "output_tokens": 5} for _ in range(5)]
    res = run(rows, num_gpu_blocks=64, max_num_seqs=2, max_num_batched_tokens=64)
    assert res.steps["num_running"].max() == 2
    assert res.requests["first_scheduled_step"].tolist()[:2] == [0, 0]


def test_preemption_takes_the_last_admitted_and_requeues_it_at_the_front() -> None:
    """Pool of 8 blocks (B=4). a, b, c (8-token prompts) take 2 blocks each in step 0. In step 1
    each crosses a block boundary: a and b get the last 2 blocks, c finds none and, being the
    last of the running list, preempts itself (recompute) back to the front of the queue."""
    rows = [{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 20, "request_id": "a"},
            {"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 20, "request_id": "b"},
            {"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 4, "request_id": "c"}]
    res = run(rows, num_gpu_blocks=9, block_size=4, max_model_len=32)
    req = res.requests.set_index("request_id")
    assert req.loc["a", "num_preemptions"] == 0
    assert req.loc["c", "num_preemptions"] >= 1
    s1 = res.steps.iloc[1]
    assert (s1.num_preempted, s1.num_running, s1.num_waiting, s1.decode_tokens) == (1, 2, 1, 2)
    assert s1.prefill_tokens == 0  # no admission in a step that preempted
    assert (res.requests["status"] == "finished").all()
    assert res.summary.preemptions == res.requests["num_preemptions"].sum()


def test_head_of_line_blocking_on_the_waiting_queue() -> None:
    """A big head that doesn't fit blocks a small request behind it (FCFS)."""
    rows = [{"arrival_s": 0.0, "prompt_tokens": 20, "output_tokens": 30, "request_id": "long"},
            {"arrival_s": 0.1, "prompt_tokens": 30, "output_tokens": 2, "request_id": "big"},
            {"arrival_s": 0.2, "prompt_tokens": 2, "output_tokens": 2, "request_id": "small"}]
    res = run(rows, num_gpu_blocks=14, block_size=4, max_model_len=52)
    req = res.requests.set_index("request_id")
    assert req.loc["small", "first_scheduled_s"] >= req.loc["big", "first_scheduled_s"]


def test_requests_that_can_never_run_are_rejected_with_a_reason() -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 5000, "output_tokens": 10},
            {"arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 10}]
    res = run(rows, num_gpu_blocks=1000, max_model_len=4096)
    assert res.requests["status"].tolist() == ["rejected", "finished"]
    assert res.requests["reject_reason"].iloc[0] == "max_model_len"
    assert res.requests["reject_detail"].iloc[0].startswith("prompt 5000 >= max_model_len 4096")


def test_memory_categories_sum_to_the_pool_at_every_step(bundled_trace) -> None:
    for kw in ({"allocator": "paged", "num_gpu_blocks": 1500},
               {"allocator": "slab", "reservation": "pow2", "kv_memory": "2GiB"}):
        res = simulate(make_config(max_model_len=4096, **kw), bundled_trace)
        total = res.steps[list(MEM_CATS)].sum(axis=1)
        assert total.nunique() == 1
        assert (res.steps[list(MEM_CATS)] >= 0).all().all()
        assert (res.requests["status"].isin(["finished", "rejected"])).all()


CONFIGS = [
    {"num_gpu_blocks": 900, "max_model_len": 8192},                        # preemption-heavy
    {"num_gpu_blocks": 300, "block_size": 4, "max_num_seqs": 16, "max_model_len": 1190},
    {"num_gpu_blocks": 400, "policy": "priority", "preset": "vllm-v1-legacy", "max_model_len": 4096},
    {"allocator": "slab", "reservation": "pow2", "model": "opt-13b", "gpu": "a100-40gb",
     "kv_memory": "12GiB", "max_model_len": 2048},
    {"allocator": "slab", "reservation": "oracle", "slab_placement": "first-fit", "kv_memory": "1GiB",
     "max_model_len": 4096},
    {"num_gpu_blocks": 700, "preemption": "swap", "swap_space": 0.5, "max_model_len": 8192},
    {"cost_model": "constant:0.01", "num_gpu_blocks": 2000, "max_model_len": 8192},
    # a chunked prefill remains in a step where a decoder finishes (num_running after finishing)
    {"num_gpu_blocks": 400, "max_model_len": 4096, "long_prefill_token_threshold": 256,
     "victim": "fewest-tokens"},
    {"num_gpu_blocks": 600, "max_model_len": 4096, "chunked_prefill": False},  # V1 steps, whole prompts
]


@pytest.mark.parametrize("kw", CONFIGS)
def test_fast_forward_is_bit_identical_to_exact_steps(bundled_trace, kw) -> None:
    """Sync scheduling; tests/test_async_scheduling.py runs the same window (sim/engine/fastforward/window.py)
    in async order on the same kind of configs."""
    kw = {"async_scheduling": False, **kw}
    check = kw.get("num_gpu_blocks", 0) <= 1000  # per-step invariant checks are O(pool)
    assert_fast_forward_identical(kw, bundled_trace, check=check)


def test_fast_forward_identical_with_prefix_sharing_on_mooncake() -> None:
    kw = dict(gpu="h200", num_gpu_blocks=1500, max_model_len=8192, async_scheduling=False)
    ff = assert_fast_forward_identical(kw, mooncake_slice())
    assert ff.summary.prefix_cache.hit_rate > 0.05


def test_swap_preemption_moves_blocks_and_charges_pcie_time(bundled_trace) -> None:
    kw = dict(num_gpu_blocks=700, max_model_len=8192)
    swap = simulate(make_config(preemption="swap", swap_space=4.0, **kw), bundled_trace, check=True)
    assert swap.steps["swap_out_blocks"].sum() > 0
    assert swap.steps["swap_out_blocks"].sum() == swap.steps["swap_in_blocks"].sum()
    assert (swap.requests["status"] == "finished").all()
    # steps that move blocks cost more than the same step would without the transfer
    moved = swap.steps[swap.steps["swap_out_blocks"] + swap.steps["swap_in_blocks"] > 0]
    assert len(moved) > 0


def test_same_inputs_same_outputs(bundled_trace) -> None:
    a = simulate(make_config(num_gpu_blocks=900, max_model_len=8192), bundled_trace)
    b = simulate(make_config(num_gpu_blocks=900, max_model_len=8192), bundled_trace)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)


def test_step_rows_go_into_the_logs_record_buffer_as_they_come(bundled_trace, monkeypatch) -> None:
    """The engine appends each step's row (a tuple in StepRecord's field order), from exact steps
    and fast-forward windows alike, and the log writes it at once into one array of records:
    no row is held as a Python object until the log is read."""
    held: list[int] = []
    frame = StepLog.frame

    def keep(log: StepLog):  # the rows as the engine appended them, before they are merged
        assert isinstance(log.rows.a, np.ndarray) and log.rows.a.dtype == STEP_DTYPE
        held.append(len(log.rows))
        return frame(log)

    monkeypatch.setattr(StepLog, "frame", keep)
    for exact in (False, True):
        held.clear()
        res = simulate(make_config(num_gpu_blocks=900, max_model_len=8192, exact_steps=exact), bundled_trace)
        assert (res.summary.fast_forward_steps > 0) is not exact  # (windows' runs are laid out as arrays)
        assert held == [res.summary.num_steps] if exact else 0 < held[0] < res.summary.num_steps


def test_parallel_sampling_fans_out_and_shares_the_prompt_through_the_cache() -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 64, "output_tokens": 8, "n": 4}]
    res = run(rows, num_gpu_blocks=200, block_size=16)
    assert len(res.requests) == 4
    assert res.requests["prefix_hit_tokens"].tolist() == [0, 48, 48, 48]
    assert res.steps["shared_blocks_saved"].max() >= 3 * 3
    assert res.summary.sharing_saved_fraction > 0


def test_roofline_is_labelled_uncalibrated(bundled_trace) -> None:
    res = simulate(make_config(max_model_len=8192, cost_model="roofline"), bundled_trace)
    assert "uncalibrated" in res.summary.cost_model and res.summary.cost_basis == "uncalibrated"
    assert np.isfinite(res.summary.ttft_s.p99)


def test_victim_choice_is_a_plain_pluggable_policy(bundled_trace) -> None:
    from sim.request import Request
    from sim.sched.policies import victim_fewest_tokens, victim_last, victim_lowest_priority

    rs = [Request(uid=i, request_id=str(i), arrival_s=float(i), prompt_tokens=10, output_tokens=5,
                  priority=p) for i, p in enumerate([0, 2, 1])]
    for r, c in zip(rs, [30, 5, 12], strict=True):
        r.num_computed_tokens = c
    assert victim_last(rs) == 2
    assert victim_fewest_tokens(rs) == 1
    assert victim_lowest_priority(rs) == 1
    kw = dict(num_gpu_blocks=900, max_model_len=8192)
    last = simulate(make_config(**kw), bundled_trace)
    fewest = simulate(make_config(victim="fewest-tokens", **kw), bundled_trace)
    assert last.summary.preemptions > 0
    assert not last.requests["num_preemptions"].equals(fewest.requests["num_preemptions"])
