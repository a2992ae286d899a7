"""Async scheduling (vLLM 0.33's GPU default): step k+1 is planned while step k runs.

What changes, each on a hand-made case (sim/sched/async_scheduler.py has the vLLM sources):
a request whose last token is in flight still holds its blocks and its running slot while the
next step is planned (more preemptions, even of itself); an arrival joins one step later; a
decode's full block is registered one step later. Fast-forward stays bit-identical.
"""

from __future__ import annotations

import pandas as pd
import pytest

from sim.config.schema import make_config
from sim.kv.paged import PagedAllocator
from sim.request import Request
from sim.run.build import build
from sim.run.simulate import simulate
from sim.sched.async_scheduler import AsyncScheduler
from sim.sched.scheduler import Scheduler
from tests.conftest import make_trace
from tests.helpers import assert_fast_forward_identical, mooncake_slice


def run(rows: list[dict], **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("cost_model", "constant:0.5")
    kw.setdefault("api_server_count", 0)  # engine-side arrivals: no front-end in between
    kw.setdefault("exact_steps", True)
    return simulate(make_config(**kw), make_trace(rows), check=True)


def test_default_follows_vllm_033_on_gpu() -> None:
    assert isinstance(build(make_config(num_gpu_blocks=300, max_model_len=2048)).sched, AsyncScheduler)
    for kw in ({"async_scheduling": False}, {"preset": "vllm-v1-legacy"}, {"preset": "paper-v0"}):
        sched = build(make_config(num_gpu_blocks=300, max_model_len=2048, **kw)).sched
        assert not sched.async_scheduling


# Pool of 3 usable blocks of 4 tokens. x: 7-token prompt (2 blocks), 4 outputs; f: 3-token prompt
# (1 block), 2 outputs. Step 0 prefills both; step 1 decodes both (x writes slot 8, f slot 4:
# no new block) and samples f's last token. Step 2: x needs a 3rd block.
TIGHT = [{"arrival_s": 0.0, "prompt_tokens": 7, "output_tokens": 4, "request_id": "x"},
         {"arrival_s": 0.0, "prompt_tokens": 3, "output_tokens": 2, "request_id": "f"}]
TIGHT_KW = dict(num_gpu_blocks=4, block_size=4, max_model_len=12)


def test_sync_frees_a_finished_request_before_planning_the_next_step() -> None:
    res = run(TIGHT, async_scheduling=False, **TIGHT_KW)
    assert res.summary.preemptions == 0
    assert res.steps["num_preempted"].tolist() == [0, 0, 0, 0]


def test_async_plans_step_2_while_f_still_holds_its_block() -> None:
    """Step 2 is planned while step 1 runs: f's last token is in flight, so f is not scheduled but
    still holds its block and is the last of the running list -- x's block need preempts it
    (vLLM pops the last running request). f's token then lands and f finishes all the same."""
    res = run(TIGHT, **TIGHT_KW)
    r = res.requests.set_index("request_id")
    assert r.loc["f", "num_preemptions"] == 1 and r.loc["x", "num_preemptions"] == 0
    assert r["status"].tolist() == ["finished", "finished"]
    assert r.loc["f", "finish_reason"] == "stop" and r.loc["f", "finish_s"] == 1.0
    assert res.steps["num_preempted"].tolist() == [0, 0, 1, 0]
    assert res.steps["decode_tokens"].tolist() == [0, 2, 1, 1]
    assert res.summary.preemptions == 1


def test_a_finisher_swapped_out_finishes_from_swap_space() -> None:
    """With --preemption swap the same victim f goes to CPU swap space; its last token lands and
    it finishes from there (never swapped back in)."""
    res = run(TIGHT, preemption="swap", **TIGHT_KW)
    r = res.requests.set_index("request_id")
    assert r.loc["f", "num_preemptions"] == 1 and (r["finish_reason"] == "stop").all()
    assert res.steps["swap_out_blocks"].tolist() == [0, 0, 1, 0]
    assert res.steps["swap_in_blocks"].sum() == 0 and res.steps["num_waiting"].tolist() == [0, 0, 0, 0]


def test_async_self_preemption_when_the_finisher_is_not_last() -> None:
    """Same pool, f admitted first: at step 2 x is the last running request and preempts itself
    (f holds the block x needs until step 1 lands). Nothing else can run, so step 2 is planned
    afresh once step 1 has landed (f freed, x's second token seen): x resumes with 9 tokens and
    hits only its first block -- its second block, filled by step 1, was not yet registered
    when x was preempted (the token in flight was unseen) -- so 5 tokens are recomputed."""
    res = run([TIGHT[1], TIGHT[0]], **TIGHT_KW)
    r = res.requests.set_index("request_id")
    assert r.loc["x", "num_preemptions"] == 1 and r.loc["f", "num_preemptions"] == 0
    assert (r["status"] == "finished").all()
    assert res.steps["prefill_tokens"].tolist() == [10, 0, 5, 0]
    assert res.steps["decode_tokens"].tolist() == [0, 2, 0, 1]
    assert res.steps["num_preempted"].tolist() == [0, 0, 1, 0]  # counted with the plan that followed
    sync = run([TIGHT[1], TIGHT[0]], async_scheduling=False, **TIGHT_KW)
    assert sync.summary.preemptions == 0
    assert sync.steps["prefill_tokens"].tolist() == [10, 0, 0, 0]


def test_an_arrival_joins_the_step_planned_after_it_arrives() -> None:
    """Constant 0.5 s steps. b arrives at 0.2, during step 0. Sync plans step 1 at 0.5 and takes
    b; async planned step 1 at 0.0 (when step 0 started), so b joins step 2, planned at 0.5 and
    run from 1.0."""
    rows = [{"arrival_s": 0.0, "prompt_tokens": 4, "output_tokens": 6, "request_id": "a"},
            {"arrival_s": 0.2, "prompt_tokens": 4, "output_tokens": 2, "request_id": "b"}]
    kw = dict(num_gpu_blocks=64, block_size=4, max_model_len=64)
    b_sync = run(rows, async_scheduling=False, **kw).requests.set_index("request_id").loc["b"]
    b_async = run(rows, **kw).requests.set_index("request_id").loc["b"]
    assert (b_sync.first_scheduled_step, b_sync.first_scheduled_s, b_sync.first_token_s) == (1, 0.5, 1.0)
    assert (b_async.first_scheduled_step, b_async.first_scheduled_s, b_async.first_token_s) == (2, 0.5, 1.5)


def test_one_request_alone_runs_the_same_steps_as_sync() -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 3}]
    a = run(rows, num_gpu_blocks=65, max_model_len=1024)
    s = run(rows, num_gpu_blocks=65, max_model_len=1024, async_scheduling=False)
    pd.testing.assert_frame_equal(a.steps, s.steps)
    assert a.steps["start_s"].tolist() == [0.0, 0.5, 1.0]


def req(uid: int, prompt: int, out: int) -> Request:
    return Request(uid=uid, request_id=str(uid), arrival_s=0.0, prompt_tokens=prompt, output_tokens=out)


@pytest.mark.parametrize("cls,registered_at_plan_1", [(Scheduler, 1), (AsyncScheduler, 0)])
def test_a_decoded_block_is_registered_one_step_later(cls: type[Scheduler], registered_at_plan_1: int) -> None:
    """A 3-token prompt (B = 4): step 1's decode fills block 0. Sync registers it in the prefix
    cache when step 1 is planned; async plans step 1 before step 0's token is seen, so it is
    registered when step 2 is planned (vLLM caches up to min(computed + new, num_tokens))."""
    s = cls(PagedAllocator(16, 4), max_num_seqs=4, max_num_batched_tokens=64)
    r = req(0, 3, 5)
    s.add(r)
    p0 = s.schedule(0.0, 0)
    done = s.update(p0, 1.0, 0)          # step 0 (prefill) samples token 1
    if not s.async_scheduling:
        s.output(p0)                     # sync: seen before the next plan
    p1 = s.schedule(1.0, 1)              # the decode that fills block 0
    assert r.kv.num_registered == registered_at_plan_1
    s.output(p0)                         # async: step 0's output lands after step 1 is planned
    s.finish(done, 1.0, 0)
    s.update(p1, 2.0, 1)
    s.schedule(2.0, 2)                   # async: planned while step 1 runs; block 0 is seen full
    assert r.kv.num_registered == 1


ASYNC_CONFIGS = [
    {"num_gpu_blocks": 900, "max_model_len": 8192},
    {"num_gpu_blocks": 300, "block_size": 4, "max_num_seqs": 16, "max_model_len": 1190},
    {"num_gpu_blocks": 2500, "block_size": 1, "max_model_len": 2048},
    {"num_gpu_blocks": 400, "policy": "priority", "max_model_len": 4096},
    {"num_gpu_blocks": 400, "max_model_len": 4096, "long_prefill_token_threshold": 256, "victim": "fewest-tokens"},
    {"num_gpu_blocks": 600, "max_model_len": 4096, "chunked_prefill": False},
    {"num_gpu_blocks": 700, "preemption": "swap", "swap_space": 0.5, "max_model_len": 8192},
    {"allocator": "slab", "reservation": "pow2", "model": "opt-13b", "gpu": "a100-40gb", "kv_memory": "12GiB",
     "max_model_len": 2048},
]


@pytest.mark.parametrize("kw", ASYNC_CONFIGS)
def test_async_fast_forward_is_bit_identical_to_exact_steps(bundled_trace, kw: dict) -> None:
    check = kw.get("block_size", 16) > 1  # per-step invariant checks are O(pool): slow at B = 1
    assert isinstance(build(make_config(**kw)).sched, AsyncScheduler)
    ff = assert_fast_forward_identical(kw, bundled_trace, check=check)
    assert ff.summary.fast_forward_steps > 0.5 * len(ff.steps)


def test_async_fast_forward_identical_with_prefix_sharing_on_mooncake() -> None:
    kw = dict(gpu="h200", num_gpu_blocks=1500, max_model_len=8192)
    ff = assert_fast_forward_identical(kw, mooncake_slice(), check=True)
    assert ff.summary.prefix_cache.hit_rate > 0.05


def test_async_changes_decisions_on_a_real_trace(bundled_trace) -> None:
    """Not only timing: with the same pool, async and sync plan different steps."""
    kw = dict(num_gpu_blocks=900, max_model_len=8192)
    a = simulate(make_config(**kw), bundled_trace)
    s = simulate(make_config(async_scheduling=False, **kw), bundled_trace)
    assert len(a.steps) != len(s.steps)
    assert not a.requests["num_preemptions"].equals(s.requests["num_preemptions"])
    assert a.steps["num_preempted"].sum() == a.summary.preemptions


def test_cli_switches_reach_the_config(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from sim.cli.main import _load, app

    _load(("sim.cli.simulate",))
    trace = tmp_path / "t.csv"
    make_trace([{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 4}]).df.to_csv(trace, index=False)
    base = ["simulate", str(trace), "--num-gpu-blocks", "300", "--max-model-len", "2048", "--cost-model", "constant:0.1"]
    for flags, lag, chunked in (([], True, True), (["--no-async-scheduling", "--no-enable-chunked-prefill"], False, False)):
        out = tmp_path / str(len(flags))
        res = CliRunner().invoke(app, [*base, "--out", str(out), *flags])
        assert res.exit_code == 0, res.output
        cfg = json.loads((out / "summary.json").read_text())["config"]
        assert (cfg["async_scheduling"], cfg["chunked_prefill"]) == (lag, chunked)


def test_a_lone_requests_last_step_lands_in_its_window() -> None:
    """Async, a request alone on an idle replica: its window lands the step that samples its
    last token itself (the exact loop would plan nothing and only wait for it), so every step
    lands in a window (the exact loop plans and launches the first), and the run is the one
    exact steps give. Handed over, each request's last step would land in the exact loop."""
    rows = [dict(request_id=str(i), arrival_s=10.0 * i, prompt_tokens=200 + 37 * i, output_tokens=40 + 3 * i)
            for i in range(6)]
    ff = assert_fast_forward_identical(dict(num_gpu_blocks=300, max_model_len=2048), make_trace(rows), check=True)
    assert ff.summary.num_steps == ff.summary.fast_forward_steps
