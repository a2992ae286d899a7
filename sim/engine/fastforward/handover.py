"""The sync window's hand-over to the exact loop when a live router's next arrival falls
inside the step being planned (:mod:`sim.engine.fastforward.window`)."""

from __future__ import annotations

from sim.engine.step import StepKernel
from sim.request import Request
from sim.sched.plan import StepPlan


def hand_over(k: StepKernel, running: list[Request], s: int, plan: StepPlan | None) -> None:
    """Sync: step ``s + 1`` is planned (blocks appended, admissions made) but would end at or
    after the router's next arrival. Every decoder gets its real counts after ``s`` window
    steps, and the step is left to the exact loop as ``k.pending``."""
    real = {r.uid for r, _ in plan.scheduled} if plan is not None else set()
    for r in running:
        if r.uid not in real:
            r.num_computed_tokens += s
            r.num_output += s
            r.num_tokens += s
    k.pending = _pending_plan(running, plan)


def _pending_plan(running: list[Request], admitted: StepPlan | None) -> StepPlan:
    """The plan ``sched.schedule`` returns for a sync window step: every decoder one token
    (running order), then the admissions."""
    if admitted is None:
        return StepPlan(scheduled=[(r, 1) for r in running])
    new = {r.uid for r, _ in admitted.scheduled}
    admitted.scheduled[:0] = [(r, 1) for r in running if r.uid not in new]
    return admitted
