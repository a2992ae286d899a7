"""vLLM 0.33 rules kvsim got wrong before issue 11 (items 1-3), each on a hand-made case.

1. Priority ties: vLLM preempts ``max(running, key=(priority, arrival_time))`` where
   ``arrival_time`` is the wall clock at submission, so of two requests with the same trace
   arrival the later-submitted one is preempted.
2. ``--no-enable-chunked-prefill`` under the V1 presets keeps V1's mixed steps (decodes and whole
   prompts together); only the paper-v0 preset runs prompt-only steps.
3. A request with prompt + output > max_model_len runs and stops at max_model_len (finish reason
   "length"); only a prompt that leaves no room for an output token is rejected.
"""

from __future__ import annotations

import pandas as pd
import pytest

from sim.config.schema import make_config
from sim.kv.paged import PagedAllocator
from sim.request import Request, Status
from sim.run.build import build
from sim.run.simulate import simulate
from sim.sched.paper_v0 import PaperV0Scheduler
from sim.sched.plan import StepPlan
from sim.sched.policies import victim_lowest_priority
from sim.sched.queues import PriorityQueue
from sim.sched.scheduler import Scheduler
from tests.conftest import make_trace


def req(uid: int, prompt: int, out: int = 4, arrival: float = 0.0, prio: int = 0) -> Request:
    return Request(uid=uid, request_id=str(uid), arrival_s=arrival, prompt_tokens=prompt,
                   output_tokens=out, priority=prio)


def step(s: Scheduler, k: int) -> StepPlan:
    plan = s.schedule(float(k), k)
    s.finish(s.update(plan, float(k + 1), k), float(k + 1), k)
    s.kv.check(s.running)
    return plan


def scheduled(plan: StepPlan) -> list[tuple[int, int]]:
    return [(r.uid, n) for r, n in plan.scheduled]


# ---- 1. priority ties --------------------------------------------------------------------------

def test_priority_tie_preempts_the_later_submitted_request() -> None:
    """8 usable blocks of 4. Three 8-token prompts with equal priority and equal arrival take 2
    blocks each; at the first decode each needs a 3rd block and only 2 are free. vLLM's victim is
    the later-submitted request (uid 2), which here is the one asking: it preempts itself. Before
    the fix kvsim took the first of the tie, uid 0, and let uid 2 run."""
    s = Scheduler(PagedAllocator(9, 4, enable_caching=False), max_num_seqs=8, max_num_batched_tokens=64,
                  queue=PriorityQueue(), choose_victim=victim_lowest_priority)
    rs = [req(i, 8) for i in range(3)]
    for r in rs:
        s.add(r)
    step(s, 0)
    plan = step(s, 1)
    assert plan.num_preempted == 1
    assert [r.status for r in rs] == [Status.RUNNING, Status.RUNNING, Status.PREEMPTED]
    assert scheduled(plan) == [(0, 1), (1, 1)]


def test_priority_victim_order_is_priority_then_arrival_then_submission() -> None:
    rs = [req(0, 4, arrival=1.0, prio=1), req(1, 4, arrival=2.0, prio=0), req(2, 4, arrival=1.0, prio=1),
          req(3, 4, arrival=0.5, prio=1)]
    assert victim_lowest_priority(rs) == 2          # prio 1, arrival 1.0 tie with uid 0 -> uid 2
    assert victim_lowest_priority(rs[:2]) == 0      # a less important priority wins over arrival
    assert victim_lowest_priority([rs[3], rs[0]]) == 1  # then the later arrival


# ---- 2. no chunked prefill in V1 ---------------------------------------------------------------

def test_v1_without_chunked_prefill_mixes_decodes_with_whole_prompts() -> None:
    """Token budget 16. a decodes while b's 12-token prompt runs whole in the same step; c's
    16-token prompt does not fit what is left of the budget and waits -- it is not chunked."""
    s = Scheduler(PagedAllocator(64, 4, enable_caching=False), max_num_seqs=8, max_num_batched_tokens=16,
                  chunked_prefill=False)
    a, b, c = req(0, 8, out=10), req(1, 12, out=10), req(2, 16, out=10)
    s.add(a)
    assert scheduled(step(s, 0)) == [(0, 8)]
    s.add(b)
    s.add(c)
    assert scheduled(step(s, 1)) == [(0, 1), (1, 12)]
    assert scheduled(step(s, 2)) == [(0, 1), (1, 1)]  # 14 tokens left < 16: c waits, unchunked
    chunked = Scheduler(PagedAllocator(64, 4, enable_caching=False), max_num_seqs=8, max_num_batched_tokens=16)
    chunked.add(req(0, 8, out=10))
    step(chunked, 0)
    chunked.add(req(2, 16, out=10))
    assert scheduled(step(chunked, 1)) == [(0, 1), (2, 15)]  # with chunking it would have started


@pytest.mark.parametrize("preset", ["vllm-0.33", "vllm-v1-legacy"])
def test_v1_presets_without_chunked_prefill_build_the_v1_scheduler(preset: str) -> None:
    parts = build(make_config(preset=preset, chunked_prefill=False, num_gpu_blocks=200, max_model_len=2048))
    assert type(parts.sched) is not PaperV0Scheduler
    assert parts.sched.mixed_steps and not parts.sched.chunked_prefill
    paper = build(make_config(preset="paper-v0", num_gpu_blocks=200, max_model_len=2048))
    assert isinstance(paper.sched, PaperV0Scheduler)


def test_v1_without_chunked_prefill_runs_prompts_and_decodes_in_one_step(bundled_trace) -> None:
    kw = dict(num_gpu_blocks=2000, max_model_len=4096, cost_model="constant:0.01", async_scheduling=False)
    v1 = simulate(make_config(chunked_prefill=False, **kw), bundled_trace)
    mixed = v1.steps[(v1.steps["prefill_tokens"] > 0) & (v1.steps["decode_tokens"] > 0)]
    assert len(mixed) > 0
    paper = simulate(make_config(preset="paper-v0", **kw), bundled_trace)
    assert not ((paper.steps["prefill_tokens"] > 0) & (paper.steps["decode_tokens"] > 0)).any()
    assert (v1.requests["status"] != "unfinished").all()


# ---- 3. max_model_len: cut, not rejected -------------------------------------------------------

def run(rows: list[dict], **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("cost_model", "constant:0.5")
    kw.setdefault("api_server_count", 0)  # engine-side arrivals: no front-end in between
    return simulate(make_config(**kw), make_trace(rows), check=True)


def test_output_past_max_model_len_is_cut_there_with_finish_reason_length() -> None:
    """max_model_len 64: a 60-token prompt asking for 10 tokens gets 4 (64 - 60), finish reason
    "length"; a 63-token prompt gets 1; a 64-token prompt leaves no room and is rejected; a
    request that fits stops at its own length ("stop")."""
    rows = [{"arrival_s": 0.0, "prompt_tokens": 60, "output_tokens": 10, "request_id": "cut"},
            {"arrival_s": 0.0, "prompt_tokens": 63, "output_tokens": 5, "request_id": "one"},
            {"arrival_s": 0.0, "prompt_tokens": 64, "output_tokens": 1, "request_id": "full"},
            {"arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 3, "request_id": "fits"}]
    res = run(rows, num_gpu_blocks=64, block_size=16, max_model_len=64)
    r = res.requests.set_index("request_id")
    assert r["status"].tolist() == ["finished", "finished", "rejected", "finished"]
    assert r["finish_reason"].tolist() == ["length", "length", "rejected", "stop"]
    assert r.loc["cut", "output_tokens"] == 4 and r.loc["one", "output_tokens"] == 1
    assert r.loc["full", "reject_reason"] == "max_model_len"
    # 4 tokens: the prefill step samples the first, three decode steps the rest (0.5 s each)
    assert r.loc["cut", "finish_s"] - r.loc["cut", "first_token_s"] == pytest.approx(3 * 0.5)
    assert res.summary.num_length_capped == 2
    assert res.summary.num_rejected == 1


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_fast_forward_finishes_cut_requests_bit_identically(bundled_trace, async_scheduling: bool) -> None:
    kw = dict(num_gpu_blocks=600, max_model_len=1024, async_scheduling=async_scheduling)
    ff = simulate(make_config(**kw), bundled_trace, check=True)
    ex = simulate(make_config(exact_steps=True, **kw), bundled_trace, check=True)
    cut = ff.requests[ff.requests["finish_reason"] == "length"]
    assert len(cut) > 10 and ff.summary.num_length_capped == len(cut)
    assert (cut["prompt_tokens"] + cut["output_tokens"] == 1024).all()
    assert ff.summary.fast_forward_steps > 0
    pd.testing.assert_frame_equal(ff.requests, ex.requests, check_exact=True)
    pd.testing.assert_frame_equal(ff.steps, ex.steps, check_exact=True)
