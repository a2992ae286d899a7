"""Preemption strategies: what happens to a victim's KV (vllm-v1-semantics.md s6).

* :class:`Recompute` (vLLM V1): free the blocks, reset the computed count, put the request
  back at the front of the waiting queue; its prefix may still hit its own cached blocks.
* :class:`Swap` (the paper's V0 swap, grafted onto V1 -- a named deviation): copy the blocks
  to CPU swap space and resume later in swapped order, before any new admission; when the
  swap space is full the victim is recomputed instead and counted (``fallbacks``).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from sim.kv.base import KvAllocator, cdiv
from sim.request import Request, Status
from sim.sched.admission import Admission
from sim.sched.plan import StepPlan
from sim.sched.queues import WaitQueue


class Scheduler(Protocol):
    """What a strategy may touch of the scheduler that hands itself in."""

    kv: KvAllocator
    waiting: WaitQueue
    running: list[Request]
    max_num_seqs: int
    admission: Admission

    def run(self, req: Request) -> None: ...


class Recompute:
    name = "recompute"

    def __init__(self) -> None:
        self.swapped: deque[Request] = deque()  # always empty: nothing to resume
        self.fallbacks = 0

    def preempt(self, sched: Scheduler, victim: Request, plan: StepPlan) -> None:
        sched.kv.free(victim)
        victim.status = Status.PREEMPTED
        victim.num_computed_tokens = 0
        sched.waiting.prepend(victim)

    def resume(self, sched: Scheduler, plan: StepPlan, budget: int) -> int:
        return budget

    def forget(self, sched: Scheduler, req: Request) -> None:
        """Drop a preempted request that finished after all (async scheduling: its last token
        was in flight when it was preempted)."""
        sched.waiting.remove(req)


class Swap(Recompute):
    name = "swap"

    def __init__(self, cpu_blocks: int) -> None:
        super().__init__()
        self.cpu_blocks = cpu_blocks
        self.cpu_used_blocks = 0

    def preempt(self, sched: Scheduler, victim: Request, plan: StepPlan) -> None:
        nblocks = sched.kv.num_held_blocks(victim)
        if self.cpu_used_blocks + nblocks > self.cpu_blocks:
            self.fallbacks += 1  # CPU swap space full: recompute instead (counted)
            super().preempt(sched, victim, plan)
            return
        sched.kv.free(victim)
        self.cpu_used_blocks += nblocks
        plan.swap_out_blocks += nblocks
        victim.status = Status.SWAPPED
        self.swapped.append(victim)

    def resume(self, sched: Scheduler, plan: StepPlan, budget: int) -> int:
        """Swap requests back in, oldest first, while the admission rule and the budget allow."""
        kv, swapped = sched.kv, self.swapped
        while swapped and budget > 0 and len(sched.running) < sched.max_num_seqs:
            r = swapped[0]
            if not sched.admission.may_resume(kv, r):
                break
            swapped.popleft()
            need = cdiv(r.num_computed_tokens, kv.block_size)
            n = r.num_tokens - r.num_computed_tokens
            kv.allocate(r, n)  # the swapped-in blocks and the step's new ones, in one take
            self.cpu_used_blocks -= need
            plan.swap_in_blocks += need
            r.status = Status.RUNNING
            sched.run(r)
            plan.scheduled.append((r, n))
            budget -= n
        return budget

    def forget(self, sched: Scheduler, req: Request) -> None:
        if req.status is Status.SWAPPED:
            self.swapped.remove(req)
            self.cpu_used_blocks -= cdiv(req.num_computed_tokens, sched.kv.block_size)
        else:
            super().forget(sched, req)
