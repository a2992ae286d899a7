"""A window's quiet steps, one after another in one compiled call (``_quiet_steps.c``).

Most steps of a busy replica are quiet (:mod:`sim.engine.fastforward.window`): decodes only,
nothing finishes, admission can admit nothing. They come a few at a time (on the 70B replica of
issue 19, 49,965 of them in 10,274 stretches: a median of 3), too few for a run of quiet steps
(:mod:`sim.engine.fastforward.runs`, ``MIN_RUN`` steps at least, with no decoder finishing).
The window's Python for one quiet step (the crossing, the step time, the record) is the
reference; ``_quiet_steps.steps`` does the same, in the same order, for as many steps as the
window's loop head would let through, pulling the arrivals due on the way as the window does
(through the window's own callables), and returns the window's locals (the C source lists where
it stops).

It applies where the window's step is inline arithmetic throughout: a paged pool whose
breakdown is linear, crossings by cross_boundary's compiled call (:meth:`DecodeBlocks.cross_call`),
and a cost model with folded decode terms (:class:`~sim.cost.bulk.DecodeTimes`). Elsewhere, or
without the extension (``KVSIM_PURE_PYTHON``), :func:`bind` gives None and the window steps in
Python.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from sim.compiled import compiled
from sim.cost.batch import StepBatch
from sim.cost.bulk import folds_decode_terms
from sim.engine.fastforward.decoders import nearest
from sim.engine.fastforward.steps import NO_PLAN, new_batch
from sim.engine.step import StepKernel
from sim.kv.base import LinearBreakdown
from sim.request import Request
from sim.sched.plan import StepPlan

COMPILED = compiled("sim.engine.fastforward._quiet_steps")  # tests set it to None to compare both
ROOM = 1 << 62  # no progress hook: no limit on the records a call appends


class QuietSteps:
    """The compiled quiet steps of one window: its constants, bound once."""

    __slots__ = ("boundary", "ends", "fin", "fixed", "k", "lag", "na_gate", "run_gap", "steps")

    def __init__(self, k: StepKernel, lag: int, fixed: tuple[Any, ...], steps: Callable[..., Any],
                 fin: dict[int, list[Request]], ends: list[int], run_gap: int, pausable: bool) -> None:
        self.k, self.lag, self.fixed, self.steps, self.fin, self.ends = k, lag, fixed, steps, fin, ends
        self.run_gap = run_gap  # a run's least length (-1: no runs in this window)
        self.na_gate = lag and pausable  # async and pausable: the window waits at a router's arrival
        #: boundary(s1) -> blocks taken: decoders.boundary at window step s1, one compiled call
        self.boundary: Callable[[int], int] = partial(getattr(COMPILED, "boundary"), fixed)  # noqa: B009

    def take(self, s: int, t: float, pages: int, c0_sum: int, decoders: int, dt: float, p_plan: StepPlan,
             p_batch: StepBatch, p_dt: float, p_start: float, qnw: int, head: Request | None, nrun: int, due: float,
             na: float, held: bool | int | None, room: float) -> tuple[Any, ...]:
        """Steps ``s + 1, ...`` (the window has checked the first), as the window would take them:
        ``n`` of them, and the window's locals after them (``s, t, pages, dt, p_plan, p_batch,
        p_dt, p_start, due, held, qnw, head``: arrivals may be pulled on the way); the kernel's
        counters move on by ``n``. ``nrun``: the running requests (a quiet step changes none)."""
        k, gap, last = self.k, self.run_gap, 0
        if gap >= 0:  # the window asks for a run at s1 <= last (fin's keys stay as they are), held True
            last = int(min(nearest(self.fin, self.ends) - gap, ROOM))
        terms = k.decode_terms(decoders)
        assert terms is not None  # (bind checked it)
        first = (p_batch.prefill_tokens, p_batch.num_decode_seqs, p_plan.num_preempted, p_plan.swap_out_blocks,
                 p_plan.swap_in_blocks)  # the first record's fields from the step before (lag 1)
        n, t, pages, dt, p_dt, p_start, busy, due, qnw, head, held = self.steps(
            self.fixed, s, t, pages, c0_sum, decoders, dt, p_dt, p_start, k.busy_s, k.step, due, na,
            float("inf") if self.na_gate else na, gap, last, room if room < ROOM else ROOM, nrun, qnw, head, held,
            k.sched.max_num_batched_tokens - decoders, terms, first)
        if n:
            s += n
            k.busy_s = busy
            k.step += n
            k.ff_steps += n
            k.bulk_steps += n
            if self.lag:  # the step in flight is the last one taken
                p_plan, p_batch = NO_PLAN, new_batch((0, 0, 0.0, 0, decoders, c0_sum + decoders * s, pages,
                                                      k.page_size, 0, 0, k.block_bytes))
        return n, s, t, pages, dt, p_plan, p_batch, p_dt, p_start, due, held, qnw, head


def bind(k: StepKernel, lag: int, buckets: list[list[Request]], fin: dict[int, list[Request]], ends: list[int],
         register: Callable[[list[Request], int], None] | None, lin: LinearBreakdown | None,
         run_gap: int, pausable: bool, pull: Callable[[float], None],
         next_due: Callable[[], float] | None) -> QuietSteps | None:
    """The window's compiled quiet steps, or None where they do not apply (module docstring).
    ``pull(t)`` and ``next_due()``: the window's own (a quiet step pulls the arrivals due)."""
    steps = getattr(COMPILED, "steps", None)
    blocks = k.decode_blocks
    if steps is None or blocks is None or lin is None or not folds_decode_terms(k.cost):
        return None
    call = blocks.cross_call()
    if call is None or call[10] != len(buckets):
        return None
    fixed = (buckets, lag, register, fin, k.kv.headroom, k.log.append, lin.usable, lin.null_slots,
             pull if next_due is not None else None, next_due, k.sched.waiting, k.sched.admits_nothing,
             blocks.cross_boundary, *call)
    return QuietSteps(k, lag, fixed, steps, fin, ends, run_gap, pausable)
