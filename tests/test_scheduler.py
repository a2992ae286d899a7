"""The V1 scheduler on its own: a paged pool, hand-made requests, no SimPy, no cost model.

Each test builds the pieces the scheduler takes (queue, admission, preemption, victim) and
reads one or two steps' plans, so each rule is specified in isolation.
"""

from __future__ import annotations

from sim.kv.paged import PagedAllocator
from sim.request import Request, Status
from sim.sched.admission import Admission
from sim.sched.paper_v0 import PaperV0Scheduler
from sim.sched.plan import StepPlan
from sim.sched.preemption import Recompute, Swap
from sim.sched.queues import FcfsQueue, PriorityQueue
from sim.sched.scheduler import Scheduler


def req(uid: int, prompt: int, out: int = 4, prio: int = 0, arrival: float = 0.0) -> Request:
    return Request(uid=uid, request_id=str(uid), arrival_s=arrival or float(uid), prompt_tokens=prompt,
                   output_tokens=out, priority=prio)


def sched(blocks: int, B: int = 4, **kw) -> Scheduler:
    kw.setdefault("max_num_seqs", 8)
    kw.setdefault("max_num_batched_tokens", 64)
    return Scheduler(PagedAllocator(blocks, B, enable_caching=False), **kw)


def step(s: Scheduler, k: int = 0) -> StepPlan:
    """Schedule one step and apply its outcome (end time k + 1)."""
    plan = s.schedule(float(k), k)
    s.finish(s.update(plan, float(k + 1), k), float(k + 1), k)
    s.kv.check(s.running)
    return plan


def scheduled(plan: StepPlan) -> list[tuple[int, int]]:
    return [(r.uid, n) for r, n in plan.scheduled]


def test_running_requests_are_served_before_new_admissions() -> None:
    s = sched(32)
    a, b = req(0, 8), req(1, 8)
    s.add(a)
    step(s)                      # a prefills
    s.add(b)
    plan = step(s, 1)
    assert scheduled(plan) == [(0, 1), (1, 8)]  # a's decode first, then b's prefill


def test_token_budget_chunks_a_long_prompt() -> None:
    s = sched(64, max_num_batched_tokens=16)
    s.add(req(0, 40))
    assert [scheduled(step(s, k)) for k in range(3)] == [[(0, 16)], [(0, 16)], [(0, 8)]]


def test_full_isl_reserve_holds_back_a_prompt_whose_whole_sequence_does_not_fit() -> None:
    """Pool of 5 usable blocks (B=4). A 24-token prompt needs 6 blocks: with the reserve it is not
    admitted even though its first 8-token chunk would fit; without it, the chunk runs."""
    strict = sched(6, max_num_batched_tokens=8, admission=Admission(reserve_full_isl=True))
    strict.add(req(0, 24))
    assert strict.schedule(0.0, 0).scheduled == []
    loose = sched(6, max_num_batched_tokens=8, admission=Admission(reserve_full_isl=False))
    loose.add(req(0, 24))
    assert scheduled(loose.schedule(0.0, 0)) == [(0, 8)]


def test_watermark_applies_only_while_something_runs() -> None:
    s = sched(9, admission=Admission(reserve_full_isl=True, watermark_blocks=3))  # 8 usable
    s.add(req(0, 16))             # 4 blocks; nothing runs yet -> no watermark
    step(s)
    s.add(req(1, 8))              # 2 blocks + 3 watermark > 4 free -> held back
    assert [r.uid for r, _ in s.schedule(1.0, 1).scheduled] == [0]
    assert s.admission.hopeless(s.kv, s.waiting.peek(), has_running=True)


def test_admit_after_a_hopeless_check_decides_as_admit_does() -> None:
    """``Admission.admit_hopeful`` (the waiting pass, right after ``hopeless`` said False) skips
    the full-ISL reserve check ``hopeless`` has just made: the same decision, the same blocks and
    the same recorded margins as ``admit``, on pools from empty to full, with and without a
    watermark, for prompts that fit, fit exactly and do not fit."""
    for watermark in (0, 2):
        for used in range(0, 9):
            for prompt in (4, 12, 16, 20, 32):
                pools = []
                for hopeful in (False, True):
                    kv = PagedAllocator(10, 4, enable_caching=False)  # 9 usable blocks
                    filler = req(9, 4 * used)
                    if used:
                        assert kv.allocate(filler, 4 * used)
                    adm, r = Admission(watermark_blocks=watermark), req(0, prompt)
                    if adm.hopeless(kv, r, bool(used)):
                        pools.append(None)
                        continue
                    admit = adm.admit_hopeful if hopeful else adm.admit
                    ok = admit(kv, r, min(prompt, 8), [], bool(used))
                    pools.append((ok, list(r.kv.blocks) if r.kv else [], kv.num_free_blocks,
                                  kv.headroom.pass_min, kv.headroom.fail_max))
                assert pools[0] == pools[1], (watermark, used, prompt, pools)


def test_recompute_preempts_the_last_running_request_to_the_queue_front() -> None:
    """8 usable blocks of 4: three 8-token prompts take 2 each; at the first decode each needs a
    3rd block, only 2 are free -> the last admitted request is preempted (recompute)."""
    s = sched(9, preemption=Recompute())
    rs = [req(i, 8) for i in range(3)]
    for r in rs:
        s.add(r)
    step(s)
    plan = step(s, 1)
    assert plan.num_preempted == 1 and scheduled(plan) == [(0, 1), (1, 1)]
    assert rs[2].status == Status.PREEMPTED and rs[2].num_computed_tokens == 0
    assert s.waiting.peek() is rs[2] and s.kv.num_held_blocks(rs[2]) == 0


def test_swap_keeps_the_computed_tokens_and_resumes_before_new_admissions() -> None:
    s = sched(9, preemption=Swap(cpu_blocks=10))
    rs = [req(i, 8, out=3) for i in range(3)]
    for r in rs:
        s.add(r)
    step(s)
    plan = step(s, 1)
    assert plan.swap_out_blocks == 2 and rs[2].status == Status.SWAPPED
    assert rs[2].num_computed_tokens == 8          # its KV is on the CPU, not lost
    s.add(req(3, 4))
    plans = [step(s, k) for k in range(2, 5)]
    resumed = next(p for p in plans if p.swap_in_blocks)
    assert resumed.swap_in_blocks == 2
    uids = [r.uid for r, _ in resumed.scheduled]
    assert 2 in uids and (3 not in uids or uids.index(2) < uids.index(3))


def test_swap_falls_back_to_recompute_when_cpu_space_is_full() -> None:
    strat = Swap(cpu_blocks=1)
    s = sched(9, preemption=strat)
    rs = [req(i, 8) for i in range(3)]
    for r in rs:
        s.add(r)
    step(s)
    step(s, 1)
    assert strat.fallbacks == 1 and rs[2].status == Status.PREEMPTED


def test_priority_queue_admits_the_most_important_first() -> None:
    s = sched(64, queue=PriorityQueue(), max_num_seqs=1)
    s.add(req(0, 4, prio=5))
    s.add(req(1, 4, prio=1))
    assert scheduled(s.schedule(0.0, 0)) == [(1, 4)]


def test_fcfs_queue_is_first_come_first_served_and_preempted_requests_go_first() -> None:
    q = FcfsQueue()
    a, b, c = req(0, 4), req(1, 4), req(2, 4)
    q.add(a)
    q.add(b)
    q.prepend(c)
    assert [q.pop(), q.pop(), q.pop()] == [c, a, b]


def test_the_victim_policy_is_a_plain_callable() -> None:
    chosen: list[int] = []

    def first(running) -> int:
        chosen.append(len(running))
        return 0

    s = sched(9, choose_victim=first)
    for i in range(3):
        s.add(req(i, 8))
    step(s)
    plan = step(s, 1)
    assert chosen and plan.num_preempted >= 1
    assert s.running[0].uid != 0  # the oldest request was the one preempted


def test_finish_frees_blocks_and_keeps_running_order() -> None:
    s = sched(32)
    a, b = req(0, 4, out=1), req(1, 4, out=3)
    s.add(a)
    s.add(b)
    step(s)
    assert a.status == Status.FINISHED and a.finish_step == 0
    assert s.running == [b] and s.kv.num_held_blocks(a) == 0


def test_paper_v0_steps_run_prompts_or_decodes_never_both() -> None:
    s = PaperV0Scheduler(PagedAllocator(32, 4, null_block=False, free_order="stack", enable_caching=False),
                         max_num_seqs=8, max_num_batched_tokens=64)
    s.add(req(0, 8, out=5))
    step(s)
    s.add(req(1, 8))
    plan = step(s, 1)
    assert scheduled(plan) == [(1, 8)]  # the new prompt runs alone; request 0 waits a step
