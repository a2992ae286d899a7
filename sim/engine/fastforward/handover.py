"""How a fast-forward window (:mod:`sim.engine.fastforward.window`) hands over to the exact
loop: at its end (:func:`close`), or, sync, when a live router's next arrival falls inside the
step being planned and the window may not wait for it (:func:`hand_over`). Async, a last step
that the exact loop would only wait for is landed by the window itself (:func:`lands_alone`)."""

from __future__ import annotations

import math
from collections.abc import Collection

from sim.cost import StepBatch
from sim.engine.fastforward.decoders import shift, uids
from sim.engine.fastforward.steps import land
from sim.engine.fastforward.window_state import WindowState
from sim.engine.step import InFlight, StepKernel
from sim.request import Request
from sim.sched.plan import StepPlan


def hand_over(k: StepKernel, running: list[Request], s: int, plan: StepPlan | None) -> None:
    """Sync: step ``s + 1`` is planned (blocks appended, admissions made) but would end at or
    after the router's next arrival. Every decoder gets its real counts after ``s`` window
    steps, and the step is left to the exact loop as ``k.pending``."""
    real = uids(plan)
    shift([r for r in running if r.uid not in real], s)
    k.pending = _pending_plan(running, plan)


def _pending_plan(running: list[Request], admitted: StepPlan | None) -> StepPlan:
    """The plan ``sched.schedule`` returns for a sync window step: every decoder one token
    (running order), then the admissions."""
    if admitted is None:
        return StepPlan(scheduled=[(r, 1) for r in running])
    new = {r.uid for r, _ in admitted.scheduled}
    admitted.scheduled[:0] = [(r, 1) for r in running if r.uid not in new]
    return admitted


def close(w: WindowState, lag: int, running: list[Request], s: int, real: Collection[int], landing: bool,
          p_plan: StepPlan, p_batch: StepBatch, p_dt: float, p_start: float, p_done: list[Request],
          t: float, due: float = -math.inf, na: float = math.inf) -> tuple[float, InFlight | None]:
    """End a window of ``s`` steps: every decoder (not in ``real``) gets its real counts. Async:
    the step in flight goes back to the exact loop (its plan lists every running request: the
    exact loop's ``output`` reads only who had a token in flight), unless the window lands it
    itself (:func:`lands_alone`: ``due``, the replica's next own arrival, and ``na``, the
    router's); sync: a step left landing (more than one chunked prefill remains) lands with
    every count real."""
    k = w.k
    if landing and lag and lands_alone(k, running, p_done, p_start, t, due, na):
        land(w, p_plan, p_batch, p_dt, p_start, p_done, 0, 0)
        return t, None
    shift([r for r in running if r.uid not in real], s)
    if lag:
        return p_start, InFlight(StepPlan(scheduled=[(r, 1) for r in running], num_preempted=p_plan.num_preempted,
                                          swap_in_blocks=p_plan.swap_in_blocks), p_batch, p_dt, p_start, p_done)
    if landing:
        land(w, p_plan, p_batch, p_dt, p_start, p_done,
             sum(r.num_computed_tokens for r in running if r not in p_done), k.sched.num_waiting)
    return t, None


def lands_alone(k: StepKernel, running: list[Request], done: list[Request], start: float, end: float,
                due: float, na: float) -> bool:
    """Async: the step in flight (``start`` .. ``end``) samples the last token of every running
    request, and the exact loop would plan nothing while it runs: nothing waits, no arrival is
    due by ``start`` (``due``: the replica's own inbox), and no router acts before ``end``
    (``na``: it would read the replica mid-flight). Then the window lands it itself, as the
    exact loop would at ``end`` (``AsyncScheduler.output``, the finishes, one record), instead
    of handing it over: the last step of a lone request on an idle replica."""
    sched = k.sched
    return (due > start and na > end and len(done) == len(running) and not sched.num_waiting
            and sched.kv.connector is None)
