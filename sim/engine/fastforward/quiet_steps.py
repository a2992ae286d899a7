"""A window's quiet steps, one after another in one call.

Most steps of a busy replica are quiet (:mod:`sim.engine.fastforward.window`): decodes only,
nothing finishes, admission can admit nothing. They come a few at a time (on the 70B replica of
issue 19, 49,965 of them in 10,274 stretches: a median of 3), too few for a run of quiet steps
(:mod:`sim.engine.fastforward.runs`, ``MIN_RUN`` steps at least, with no decoder finishing).
:meth:`QuietSteps.take` takes as many as the window's loop head would let through, pulling the
arrivals due on the way as the window does (through the window's own callables), and returns
the window's locals. Before each step after the first (which the window has checked) it makes
the window's checks again and returns, leaving that step to the window, where one fails:

    n == room                          the window's progress hook is due
    free blocks < the bucket's size    the step preempts (or the window ends)
    t >= na_gate                       a router may act first (window.py's ``t >= na``)
    s1 in fin                          a decoder samples its last token: not quiet
    due <= plan_t, then admission      an arrival is due: pulled, the waiting head checked
      may admit one                    (``admits_nothing``); ``held`` None where it may
    due - plan_t >= run_gap * dt       (held True) a run of quiet steps may be ready
      and s1 <= run_last               (no decoder finishes within run_gap steps)

and, for every step, the first included, before anything but the margin's note is changed:
``end >= na`` (the router reads the step mid-flight: the window pauses it).

A step: the margin's note (a crossing bucket's slack), the block boundary
(:func:`~sim.engine.fastforward.decoders.boundary`, its crossings by :meth:`QuietSteps.cross`),
the step time
(:func:`sim.cost.decode_time.step_time`) and the step's record, with the same values in the same
order as the window's own quiet step: ints as ints, times as floats.

It applies where the window's step is inline arithmetic throughout: a paged pool whose breakdown
is linear and a cost model with folded decode terms (:class:`~sim.cost.bulk.DecodeTimes`);
:func:`bind` gives None elsewhere. Compiled by Cython from this source where a C compiler is
(``quiet_steps.pxd``: C counts and times; the pool and the requests stay the objects they are),
else it runs as this Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.cost.batch import StepBatch
from sim.cost.bulk import folds_decode_terms
from sim.cost.decode_time import step_time
from sim.engine.fastforward.decoders import boundary, nearest
from sim.engine.fastforward.steps import NO_PLAN, new_batch
from sim.engine.step import StepKernel
from sim.kv.base import DecodeBlocks, LinearBreakdown
from sim.kv.linear import split
from sim.request import Request
from sim.sched.plan import StepPlan

ROOM = 1 << 62  # no progress hook: no limit on the records a call appends
INF = float("inf")


def no_arrival() -> float:
    """No arrival of the replica's own is due (a window without ``next_due`` takes no quiet step)."""
    return INF


class QuietSteps:
    """The quiet steps of one window: its constants, bound once."""

    def __init__(self, k: StepKernel, lag: int, buckets: list[list[Request]], fin: dict[int, list[Request]],
                 ends: list[int], register: Callable[[list[Request], int], None] | None, lin: LinearBreakdown,
                 blocks: DecodeBlocks, run_gap: int, pausable: bool, pull: Callable[[float], None],
                 next_due: Callable[[], float] | None) -> None:
        self.k, self.lag, self.buckets, self.fin, self.ends, self.register = k, lag, buckets, fin, ends, register
        self.usable, self.nulls, self.bsize = lin.usable, lin.null_slots, len(buckets)
        self.blocks, self.margin, self.rows = blocks, k.kv.headroom, k.log.rows
        call = blocks.cross_call()  # (cross_pool, pool, its arguments): sim/kv/paged.py
        self.fn: Any = call[0] if call is not None else None  # cross_boundary's compiled call
        self.call: tuple[Any, ...] = tuple(call[1:]) if call is not None else ()
        self.fq: Any = blocks.pool.free_queue  # (size: a count)
        self.pool: Any = blocks.pool  # (shared_excess)
        self.crosser: Callable[[list[Request], int | None], None] = self.cross  # (bound once)
        self.pull, self.next_due = pull, next_due if next_due is not None else no_arrival  # (a quiet window has one)
        self.waiting, self.admits = k.sched.waiting, k.sched.admits_nothing
        self.run_gap = run_gap  # a run's least length (-1: no runs in this window)
        self.na_gate = bool(lag and pausable)  # async and pausable: the window waits at a router's arrival

    def cross(self, bucket: list[Request], ahead: int | None) -> None:
        """``blocks.cross_boundary(bucket, ahead)``: its compiled call made here, where the pool
        lets it (:meth:`DecodeBlocks.cross_call`), else the method."""
        if self.fn is None:
            self.blocks.cross_boundary(bucket, ahead)
            return
        pool, bsize, mark, slow = self.call
        if not self.fn(bucket, pool, ahead, bsize, mark, slow):
            self.blocks.cross_boundary(bucket, ahead)

    def boundary(self, s1: int) -> int:
        """:func:`~sim.engine.fastforward.decoders.boundary` at window step ``s1``: the blocks taken."""
        return boundary(self.buckets, s1, self.lag, self.crosser, self.register)

    def take(self, s: int, t: float, pages: int, c0_sum: int, decoders: int, dt: float, p_plan: StepPlan,
             p_batch: StepBatch, p_dt: float, p_start: float, qnw: int, head: Request | None, nrun: int, due: float,
             na: float, held: bool | int | None, room: float) -> tuple[Any, ...]:
        """Steps ``s + 1, ...`` (the window has checked the first), as the window would take them:
        ``n`` of them, and the window's locals after them (``s, t, pages, dt, p_plan, p_batch,
        p_dt, p_start, due, held, qnw, head``: arrivals may be pulled on the way); the kernel's
        counters move on by ``n``. ``nrun``: the running requests (a quiet step changes none)."""
        k, gap, last, lag = self.k, self.run_gap, 0, self.lag
        if gap >= 0:  # the window asks for a run at s1 <= last (fin's keys stay as they are), held True
            last = int(min(nearest(self.fin, self.ends) - gap, ROOM))
        terms = k.decode_terms(decoders)
        assert terms is not None  # (bind checked it)
        dense, eta_attn, hd, a_kv, a_fl, a_pg, roof, floor, tail, sched, is_async = terms
        f0, f1, f2, f3, f4 = (p_batch.prefill_tokens, p_batch.num_decode_seqs, p_plan.num_preempted,
                              p_plan.swap_out_blocks, p_plan.swap_in_blocks)  # the first record's, from step s (lag 1)
        buckets, fin, margin, fq, pool, rows = self.buckets, self.fin, self.margin, self.fq, self.pool, self.rows
        B, usable, nulls = self.bsize, self.usable, self.nulls
        na_gate = INF if self.na_gate else na
        limit = int(room) if room < ROOM else ROOM
        budget = k.sched.max_num_batched_tokens - decoders
        step, busy, n = k.step, k.busy_s, 0
        while True:
            s1 = s + 1
            bucket = buckets[s1 % B]
            nb = len(bucket)
            slack = fq.size - nb
            plan_t = p_start if lag else t
            if n:  # the window's loop head, for the steps after its own
                if n >= limit or slack < 0 or t >= na_gate or s1 in fin:
                    break
                if nb and margin is not None and slack < margin.pass_min:
                    margin.pass_min = slack  # the decoders' block checks (Margin.note), as the window's
                if due <= plan_t:  # an arrival is due: pulled, the waiting head checked
                    self.pull(plan_t)
                    due = self.next_due()
                    qnw = len(self.waiting)
                    head = self.waiting.peek() if qnw else None
                    held = self.admits(head, budget)
                    if not held:
                        held = None
                        break  # admission may run: the window's
                if gap >= 0 and held is True and s1 <= last and due - plan_t >= gap * dt:
                    break  # a run may be ready: the window's
            pg = pages + nb
            ctx = c0_sum + decoders * s1
            d = step_time(dense, eta_attn, hd, a_kv, a_fl, a_pg, roof, floor, tail, sched, is_async, ctx, pg)
            if (t if lag else t + d) >= na:
                break  # the router reads this step mid-flight: the window pauses
            if nb or (not lag and self.register is not None):
                boundary(buckets, s1, lag, self.crosser, self.register)
            free_blocks, shared = fq.size, pool.shared_excess
            tok, res, internal, ext, free = split(B, usable, nulls, free_blocks, shared, ctx - decoders if lag else ctx)
            if lag:  # step s lands, step s1 is launched
                rows.add(step, p_start, p_dt, nrun, qnw, f0, f1, f2, free_blocks, tok, res, internal, ext, free, shared,
                         f3, f4)
                busy = busy + p_dt
                f0, f1, f2, f3, f4 = 0, decoders, 0, 0, 0
                p_dt, p_start = d, t
            else:
                rows.add(step, t, d, nrun, qnw, 0, decoders, 0, free_blocks, tok, res, internal, ext, free, shared, 0, 0)
                busy = busy + d
            step += 1
            pages, s, t, dt = pg, s1, t + d, d
            n += 1
        if n:
            k.busy_s = busy
            k.step += n
            k.ff_steps += n
            k.bulk_steps += n
            if lag:  # the step in flight is the last one taken
                p_plan, p_batch = NO_PLAN, new_batch((0, 0, 0.0, 0, decoders, c0_sum + decoders * s, pages,
                                                      k.page_size, 0, 0, k.block_bytes))
        return n, s, t, pages, dt, p_plan, p_batch, p_dt, p_start, due, held, qnw, head


def bind(k: StepKernel, lag: int, buckets: list[list[Request]], fin: dict[int, list[Request]], ends: list[int],
         register: Callable[[list[Request], int], None] | None, lin: LinearBreakdown | None,
         run_gap: int, pausable: bool, pull: Callable[[float], None],
         next_due: Callable[[], float] | None) -> QuietSteps | None:
    """The window's quiet steps, or None where they do not apply (module docstring).
    ``pull(t)`` and ``next_due()``: the window's own (a quiet step pulls the arrivals due)."""
    blocks = k.decode_blocks
    if blocks is None or lin is None or not folds_decode_terms(k.cost) or lin.block_size != len(buckets):
        return None
    return QuietSteps(k, lag, buckets, fin, ends, register, lin, blocks, run_gap, pausable, pull, next_due)
