"""Decode fast-forward: apply runs of steps in bulk, bit-identical to stepping one at a time.

In steady state most running requests are decoding: each step adds one token to each, and
the only per-request events are (a) crossing a block boundary (a new block every B steps),
(b) filling a block (its hash is registered), (c) finishing. Instead of touching every
request every step, decoders keep their token counts at a *virtual* start value ``c0`` (the
count they would have had at the start of the window) and are bucketed by ``c0 mod B``::

    step s of the window: a decoder needs a block   iff (c0 + s - 1) % B == 0
                          its last block fills      iff (c0 + s) % B == 0

so a step costs O(requests with an event), not O(batch). Most steps are *quiet*: nothing finishes
or is freed, and admission can admit nothing (``Scheduler.admits_nothing``); a quiet step skips the
admission pass and times its decodes with ``StepKernel.decode_time`` (:mod:`sim.cost.bulk`). The
answer holds until a pull or a step that frees blocks after its pass (none frees any before it),
and steps that are not quiet skip the pass while it holds. Admissions run through the scheduler's
own pass on the real (eagerly updated) block pool; a request whose prefill completes joins the
decoders, and one chunked prefill is carried on (:mod:`sim.engine.fastforward.chunked`). A step
that preempts runs in the window as :mod:`~sim.engine.fastforward.preempt` says, else the window
ends before it, as before one whose budget cannot cover every decoder, and after one that leaves
two chunked prefills. Decoders are also bucketed by the step that samples their last token, and
leave then, finished as ``Scheduler.update`` does (running order, ``Request.seq``). A live router's
arrivals pause the window (:mod:`sim.engine.fastforward.pause`). One window serves sync and async
scheduling (:mod:`sim.engine.fastforward.ordering`); async, it starts from and hands back the exact
loop's :class:`~sim.engine.step.InFlight` step. Capacity tests note their slack in the pool's and
the scheduler's :class:`~sim.kv.margin.Margin`, as exact steps do.

Everything the exact path computes -- block ids and their order, hash registrations,
StepBatch integers, float sums of step times, per-step records -- is computed here in the
same order, so ``--exact-steps`` gives identical output (tested).
"""

from __future__ import annotations

import math

from sim.engine.fastforward.chunked import carried
from sim.engine.fastforward.decoders import index
from sim.engine.fastforward.handover import close
from sim.engine.fastforward.lockstep import Polls, Sleep
from sim.engine.fastforward.ordering import Order
from sim.engine.fastforward.pause import Pausing, never
from sim.engine.fastforward.preempt import supported
from sim.engine.fastforward.quiet_steps import bind
from sim.engine.fastforward.runs import QuietRuns
from sim.engine.fastforward.steps import NO_PLAN, NONE, NextArrival, Pull, Window, new_batch
from sim.engine.fastforward.window_steps import NEXT, PLAN, WindowSteps
from sim.engine.step import InFlight, StepKernel
from sim.request import Request

PROGRESS_EVERY = 2048  # records a window appends between calls of the replica's progress hook


def fast_forward(k: StepKernel, order: Order, t: float, flight: InFlight | None, pull_due: Pull,
                 next_arrival: NextArrival | None = None, next_due: NextArrival | None = None,
                 pausable: bool = False, real_counts: bool = True, lazy: bool = False,
                 lockstep: Sleep | None = None) -> Window | None:
    """The window that runs as many steps as can be done in bulk, returning ``(time, step in
    flight)`` at the end (None: none can be). A generator: when ``pausable`` it yields the
    times to sleep until while a router acts (the replica drives it, one generator deep).

    Sync: ``flight`` is None, the window starts at ``t`` and returns when the next exact step
    starts. Async: ``flight`` is the step the exact loop just launched; it returns the step in
    flight at the end and its start (``flight`` itself when nothing could be done in bulk).

    ``pull_due(t)`` admits the arrivals due by ``t``; ``next_due()`` (the replica's next own
    arrival) lets quiet steps skip the admission pass. ``next_arrival`` is a live router's next
    arrival (it reads the replica then): pausable, the window waits there; else, sync, the step
    is handed to the exact loop as ``k.pending``, and async the window stops before planning.
    ``lockstep``: it sleeps through each step it applies on ``lockstep(dt)``, a SimPy event that it
    yields (:mod:`~sim.engine.fastforward.lockstep`).

    Not in bulk: paper-v0's prefill-only steps, swapped requests waiting, and speculative
    decoding (decoders advance by their accepted drafts, not in lockstep).
    """
    sched = k.sched
    if sched.swapped or not sched.mixed_steps or sched.spec_tokens or not sched.running:
        return None
    ok, part = carried(sched.running, order.decoding)
    if not ok:
        return None
    polls = Polls(k, lockstep) if lockstep is not None else None
    return WindowRun(k, order.lag, t, flight, pull_due, next_arrival, next_due, pausable, real_counts, part, lazy,
                     polls).run()


class WindowRun(WindowSteps):
    """One window: the state ``fast_forward`` sets up (:mod:`~sim.engine.fastforward.window_state`)
    and its loop; each step of it is the named steps of :mod:`~sim.engine.fastforward.window_steps`
    in turn (``gate``, then a ``quiet_step`` or ``plan_step``, ``land_in_flight``, ``launch`` and
    ``end_step``)."""

    def __init__(self, k: StepKernel, lag: int, t: float, f: InFlight | None, pull_due: Pull,
                 next_arrival: NextArrival | None, next_due: NextArrival | None, pausable: bool, real_counts: bool,
                 part: Request | None, lazy: bool, polls: Polls | None) -> None:
        self.k, self.lag, self.pull_due, self.pausable, self.real_counts = k, lag, pull_due, pausable, real_counts
        self.part, self.polls, self.f = part, polls, f
        sched, kv = self.sched, self.kv = k.sched, k.kv
        self.running, self.waiting = sched.running, sched.waiting
        self.max_batched, self.max_seqs, self.seqs = sched.max_num_batched_tokens, sched.max_num_seqs, sched.seq_margin
        self.fin = {}  # window step -> requests whose last token it samples
        self.ends = []  # fin's keys, a heap (decoders.nearest)
        blocks = k.decode_blocks  # None: a slab, no blocks to hand out mid-window
        self.B, self.page, self.caching, self.paged = kv.block_size, k.page_size, k.caching, blocks is not None
        self.cross, self.pool = (blocks.cross_boundary, blocks.pool) if blocks is not None else (None, None)
        self.fq = self.pool.free_queue if self.pool is not None else None  # read directly (== kv.num_free_blocks)
        self.margin = kv.headroom  # the decoders' block checks, noted as their allocations would be
        self.register = blocks.register_decoded_blocks if blocks is not None and k.caching else None
        self.sync_reg = self.paged and not lag and self.register is not None  # sync: registered as blocks fill
        lin = blocks.linear_breakdown() if blocks is not None else None
        self.linear, (self.usable, self.nulls) = lin is not None, (lin.usable, lin.null_slots) if lin is not None else (0, 0)
        self.preempts = supported(k, lin is not None)  # a step that preempts stays in the window (preempt.py)
        self.buckets = [[] for _ in range(self.B)]
        self.c0_sum, self.decoders, self.pages = index(self.running, part, self.fin, self.ends, self.buckets, self.paged)
        self.step_cost, self.bb, self.breakdown, self.rows = k.cost.step_time, k.block_bytes, kv.breakdown, k.log.rows
        self.own, self.router = next_due or never, next_arrival or never  # the replica's own next arrival; a router's
        self.quiet, self.due = next_due is not None, self.own() if next_due is not None else 0.0
        self.held = None  # truthy: no admission until a pull or a non-quiet step (2: nor a run)
        self.head = None
        self.qnw, self.s, self.dt, self.log, self.progress, self.busy = 0, 0, 0.0, k.log, k.progress, False
        self.dec_time, self.dec_n = k.decode_time(self.decoders), self.decoders
        self.na = self.router()  # no submission until the window ends
        self.landing, self.p_done = f is not None, NONE  # the step launched, not landed (p_*): async starts with f
        if f is not None:
            self.p_plan, self.p_batch, self.p_dt, self.p_start = f.plan, f.batch, f.dt, f.start
            self.p_done = f.done if f.done is not None else NONE  # an async launch has sampled
            self.t = f.start + f.dt  # when the step in flight ends
        else:
            self.p_plan, self.p_batch, self.p_dt, self.p_start, self.t = NO_PLAN, new_batch((0,) * 11), 0.0, t, t
        self.partial = {part.uid} if part is not None else set()  # chunked prefills (real counts)
        self.every = PROGRESS_EVERY  # (read once: tests lower the module's)
        self.cap = PROGRESS_EVERY if self.progress is not None else math.inf  # records before the next progress call
        pausing = Pausing(self.running, self.router, self.own, real_counts, lazy) if pausable else None
        self.runs = QuietRuns(k, lag, self.buckets, (self.usable, self.nulls), self.register, self.cross, pausing) \
            if lin is not None and self.quiet and self.cross is not None and polls is None else None
        self.quick = None if polls is not None else bind(  # (lockstep: one step at a time)
            k, lag, self.buckets, self.fin, self.ends, self.register, lin,
            self.runs.min_run if self.runs is not None else -1, pausable, pull_due, next_due)
        self.bucket = []
        self.out = None
        self.plan_t = 0.0

    def run(self) -> Window:
        while self.decoders:
            s1 = self.s + 1
            if not self.gate(s1):
                break  # not every decoder fits the budget, a step that preempts is not the window's, or a router may act
            if self.quiet and s1 not in self.fin and not (self.landing and self.p_done) and self.part is None \
                    and self.out is None and not self.busy:
                r = yield from self.quiet_step(s1)  # nothing finishes, nothing is freed, and no admission can run
                if r is NEXT:
                    continue
                if r is not PLAN:
                    return r  # handed over to the exact loop
            if not self.plan_step(s1):
                break
            if self.waits_in_flight():
                yield from self.wait_in_flight()
            if self.landing:
                self.land_in_flight()
            batch = self.launch(s1, self.planned)
            end = self.t + self.dt
            if not self.lag and (end >= self.na or self.polls is not None):
                r = yield from self.wait_launched(end)
                if r is not None:
                    return r
            if not self.end_step(s1, batch, end):
                break
        if self.polls is not None:
            self.polls.handed_back(self.s)
        if not self.s:
            return self.t if self.f is None else self.f.start, self.f
        return close(self, self.lag, self.running, self.s, self.partial | {r.uid for r in self.p_done}
                     if self.landing else self.partial, self.landing, self.p_plan, self.p_batch, self.p_dt, self.p_start,
                     self.p_done, self.t, self.due if self.quiet else -math.inf, self.na)
