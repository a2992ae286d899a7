"""The named steps of a fast-forward window (:mod:`sim.engine.fastforward.window`)::

    gate            may step s1 be the window's? (every decoder within the budget, a step that
                    preempts replayed here, no router to act first) else the window ends
    quiet_step      nothing finishes, nothing is freed, no admission can run: a run of quiet
                    steps (runs.py), a stretch (quiet_steps.py), or one, recorded inline
    plan_step       arrivals, the running pass (preemptions or the block boundary), the chunked
                    prefill's next chunk, admissions
    land_in_flight  async: the step in flight lands (its finished freed, its record)
    launch          step s1's batch and duration
    end_step        its requests advance, its finished leave; sync: it lands

with, where a router reads the replica or a lockstep sleeps, ``wait_in_flight`` and
``wait_launched`` between them (generators: they yield what the window yields). The state they
share is :class:`~sim.engine.fastforward.window_state.WindowState`'s, set up by ``WindowRun``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from sim.engine.fastforward import decoders as dec
from sim.engine.fastforward.chunked import next_chunk
from sim.engine.fastforward.decoders import boundary, by_seq, join_planned, nearest, uids
from sim.engine.fastforward.handover import hand_over
from sim.engine.fastforward.pause import pause
from sim.engine.fastforward.preempt import preempt_pass, victims
from sim.engine.fastforward.steps import NO_PLAN, NONE, land, new_batch
from sim.engine.fastforward.window_state import WindowState
from sim.kv.linear import split
from sim.request import Request
from sim.sched.plan import StepPlan

NEXT, PLAN = "next", "plan"  # what quiet_step tells the loop: the next step, or plan this one
Step = Generator[Any, Any, Any]


class WindowSteps(WindowState):
    """The steps of one window (a base of ``WindowRun``, which sets the state up)."""

    def gate(self, s1: int) -> bool:
        """Whether step ``s1`` may be the window's (its bucket, its victims, its plan time noted)."""
        if self.progress is not None and len(self.log) >= self.cap:  # a long window drains its records
            self.progress()
            self.cap = len(self.log) + self.every
        bucket = self.bucket = self.buckets[s1 % self.B] if self.paged else []
        if self.polls is not None:  # first, as Scheduler.schedule (a step then handed back is not polled twice)
            self.busy = self.polls(self.p_start if self.lag else self.t, s1)
            self.held = None if self.busy else self.held
        fq, pool = self.fq, self.pool
        slack = (fq.size if fq is not None else self.kv.num_free_blocks) - len(bucket)
        out = None  # the running pass's victims when this step preempts
        if self.decoders > self.max_batched or (slack < 0 and (
                not self.preempts or pool is None or self.part is not None  # (preempts: paged, so a pool)
                or (out := victims(self.running, bucket, self.p_done, pool.free_queue.size, pool.ref,
                                   self.decoders)) is None)):
            return False
        self.out, margin = out, self.margin
        if out is None and bucket and margin is not None and slack < margin.pass_min:
            margin.pass_min = slack  # the decoders' block checks (== margin.note), inline
        self.plan_t = self.p_start if self.lag else self.t  # async: planned while the step in flight runs
        # sync: a router may submit before this step starts; async: the step in flight ends at or after
        # the router's next arrival, which reads it mid-flight (unless pausable: it waits after the plan)
        return not (self.t >= self.na and not (self.lag and self.pausable))

    def quiet_step(self, s1: int) -> Step:
        """A quiet step (or a run or stretch of them); ``PLAN`` where admission may admit."""
        plan_t = self.plan_t
        if self.due <= plan_t:  # an arrival is due: pull it (it may change what admission sees)
            self.pull_due(plan_t)
            self.due, self.held = self.own(), None
        if self.held is None:
            self.qnw = len(self.waiting)  # == sched.num_waiting: nothing is swapped in a window
            self.head = self.waiting.peek() if self.qnw else None
            self.held = self.sched.admits_nothing(self.head, self.max_batched - self.decoders)
        if not self.held:
            return PLAN
        runs, quick, lag = self.runs, self.quick, self.lag
        if self.held is True and runs is not None and self.due - plan_t >= runs.min_run * self.dt and (
                not lag or (self.p_plan is NO_PLAN and self.p_batch.num_decode_seqs == self.decoders)):
            if nearest(self.fin, self.ends) - s1 >= runs.min_run and self.run_ready():  # (dt grows in a run: a guess)
                n = yield from runs.take(self.s, self.due, self.na, self.p_start, self.cap - len(self.log))
                if n:  # a run of quiet steps, as arrays (sim/engine/fastforward/runs.py)
                    self.s, self.t, self.pages, self.due, self.na = self.s + n, runs.t, runs.pages, runs.due, runs.na
                    self.p_dt, self.p_start = runs.p_dt, runs.p_start
                    self.p_batch = self.decode_batch(runs.ctx)
                    return NEXT
            else:
                self.held = 2  # nor a run until what ready() reads changes (a pull, a pause, a non-quiet step)
        if quick is not None and (self.t if lag else self.t + self.dt) < self.na:  # quiet steps in one call
            (n, self.s, self.t, self.pages, self.dt, self.p_plan, self.p_batch, self.p_dt, self.p_start, self.due,
             self.held, self.qnw, self.head) = quick.take(
                self.s, self.t, self.pages, self.c0_sum, self.decoders, self.dt, self.p_plan, self.p_batch, self.p_dt,
                self.p_start, self.qnw, self.head, len(self.running), self.due, self.na, self.held,
                self.cap - len(self.log))
            if n:
                return NEXT
        self.cross_boundary(s1)
        ctx = self.c0_sum + self.decoders * s1
        self.dt = self.decode_time()(ctx, self.pages)
        end = self.t if lag else self.t + self.dt  # the step in flight at the router's read ends then
        if end >= self.na:  # the router reads this step mid-flight (async: only if pausable)
            if not self.pausable:
                hand_over(self.k, self.running, self.s, None)
                return self.t, None
            self.na = yield from pause(self.k, self.running, self.s, (), end, self.na, self.router, self.real_counts)
            self.due, self.held = self.own(), True
        elif self.polls is not None:  # the step in flight (async: step s; sync: s1)
            self.due = yield from self.polls.tick(self.running, self.s, (), self.p_dt if lag else self.dt,
                                                  self.real_counts, self.own)
        self.record_quiet(s1, ctx)
        return NEXT

    def run_ready(self) -> bool:
        """Whether a run of quiet steps can start here (:meth:`QuietRuns.ready`; runs: paged)."""
        pool = self.pool
        return pool is not None and self.runs.ready(
            self.s, self.t, self.decoders, self.c0_sum, self.pages, self.fin, self.due, self.na, self.p_start,
            self.p_dt, self.qnw, len(self.running), pool.shared_excess)

    def cross_boundary(self, s1: int) -> None:
        """The decoders that need a block at step ``s1`` get one; those that fill one register it."""
        if self.bucket or (self.sync_reg and self.buckets[(s1 + 1) % self.B]):  # else boundary() does nothing
            self.pages += boundary(self.buckets, s1, self.lag, self.cross, self.register) if self.quick is None \
                else self.quick.boundary(s1)

    def decode_batch(self, ctx: int) -> Any:
        """The StepBatch of a decodes-only step: every decoder, ``ctx`` context tokens, its pages."""
        return new_batch((0, 0, 0.0, 0, self.decoders, ctx, self.pages, self.page, 0, 0, self.bb))

    def decode_time(self) -> Any:
        if self.dec_n != self.decoders:
            self.dec_time, self.dec_n = self.k.decode_time(self.decoders), self.decoders
        return self.dec_time

    def record_quiet(self, s1: int, ctx: int) -> None:
        """A quiet step's record (async: step s lands, then s1 is launched) and the counters."""
        k, lag, B = self.k, self.lag, self.B
        free_blocks = self.fq.size if self.fq is not None else self.kv.num_free_blocks
        shared = self.pool.shared_excess if self.pool is not None else self.kv.shared_excess
        comp = ctx - self.decoders if lag else ctx  # token states held when the record is taken
        if self.linear:  # LinearBreakdown.split (compiled: a C call)
            tok, res, internal, ext, free = split(B, self.usable, self.nulls, free_blocks, shared, comp)
        else:
            tok, res, internal, ext, free = self.breakdown(self.running, comp, waiting=self.head)
        if lag:
            p_plan, p_batch = self.p_plan, self.p_batch
            self.rows.add(k.step, self.p_start, self.p_dt, len(self.running), self.qnw, p_batch.prefill_tokens,
                          p_batch.num_decode_seqs, p_plan.num_preempted, free_blocks, tok, res, internal, ext, free,
                          shared, p_plan.swap_out_blocks, p_plan.swap_in_blocks)
            k.busy_s += self.p_dt
            self.p_plan, self.p_dt, self.p_start = NO_PLAN, self.dt, self.t
            self.p_batch = self.decode_batch(ctx)
        else:
            self.rows.add(k.step, self.t, self.dt, len(self.running), self.qnw, 0, self.decoders, 0, free_blocks, tok,
                          res, internal, ext, free, shared, 0, 0)
            k.busy_s += self.dt
        k.step += 1
        k.ff_steps += 1
        k.bulk_steps += 1
        self.s, self.t = s1, self.t + self.dt

    def plan_step(self, s1: int) -> bool:
        """Plan step ``s1``: arrivals, the running pass, admissions (False: not the window's)."""
        skip = self.held  # held still: the pass admits nothing unless a pull comes first (then kept)
        if not self.quiet:
            self.pull_due(self.plan_t)
        elif self.due <= self.plan_t:
            self.pull_due(self.plan_t)
            self.due, skip = self.own(), None
        part = self.part
        n_part = 0 if part is None else next_chunk(self.sched, part, self.p_done, self.decoders, self.max_batched,
                                                   len(self.bucket))
        if part is not None and not n_part:
            return False  # the chunked prefill's step is not the window's to apply: go exact
        self.planned, self.nw = self.plan(s1, skip, n_part)
        self.keep = skip and self.out is None and self.max_batched > self.decoders and not (self.landing and self.p_done)
        return True

    def waits_in_flight(self) -> bool:
        """Async: the step in flight straddles a router's arrival (pausable), or sleeps (lockstep)."""
        return bool(self.lag and ((self.pausable and self.t >= self.na) or (self.polls is not None and self.landing)))

    def wait_in_flight(self) -> Step:
        real = uids(self.planned) | {r.uid for r in self.p_done}
        if self.pausable and self.t >= self.na:  # async: step s (in flight) straddles the router's arrival
            self.na = yield from pause(self.k, self.running, self.s, real, self.t, self.na, self.router, self.real_counts)
            self.due = self.own() if self.quiet else self.due
        else:  # lockstep: sleep through step s (in flight)
            self.due = yield from self.polls.tick(self.running, self.s, real, self.p_dt, self.real_counts, self.own)

    def land_in_flight(self) -> None:
        """Async: step s lands at t, after step s1 was planned."""
        plan = self.planned
        extra = self.k.computed_of(plan.scheduled) if plan is not None else 0
        land(self, self.p_plan, self.p_batch, self.p_dt, self.p_start, self.p_done,
             self.c0_sum + self.decoders * self.s + extra, self.nw)
        self.due = self.own() if self.p_done and self.quiet else self.due  # a client's send at a finish

    def wait_launched(self, end: float) -> Step:
        """Sync: a router reads step s1 mid-flight (its end ``end``), or lockstep sleeps through it;
        returns the window's result where the exact loop must run it, else None."""
        plan = self.planned
        if end >= self.na:
            if not self.pausable:  # the exact loop runs it
                hand_over(self.k, self.running, self.s, plan)
                return self.t, None
            self.na = yield from pause(self.k, self.running, self.s, uids(plan), end, self.na, self.router,
                                       self.real_counts)
            self.due = self.own() if self.quiet else self.due
        else:  # lockstep: sleep through step s1
            self.due = yield from self.polls.tick(self.running, self.s, uids(plan), self.dt, self.real_counts, self.own)
        return None

    def end_step(self, s1: int, batch: Any, end: float) -> bool:
        """Step s1's requests advance, its finished leave; it lands (sync). False: more than one
        chunked prefill remains (the exact loop goes on)."""
        plan, keep = self.planned, self.keep
        done = self.join(s1, plan, end)
        self.p_plan, self.p_batch, self.p_dt, self.p_start = plan if plan is not None else NO_PLAN, batch, self.dt, self.t
        self.p_done, self.t, self.landing = done, end, True
        if len(self.partial) > 1:
            return False
        if not self.lag:  # sync: step s1 lands at its end, before step s1 + 1 is planned
            part = self.part
            land(self, self.p_plan, self.p_batch, self.p_dt, self.p_start, self.p_done,
                 self.c0_sum + self.decoders * self.s + (part.num_computed_tokens if part is not None else 0), self.nw)
            self.landing, keep = False, keep and not done
            self.due = self.own() if done and self.quiet else self.due  # (as above)
        self.held = True if keep else None
        return True

    def plan(self, s1: int, skip: Any, n_part: int) -> tuple[StepPlan | None, int]:
        """Step ``s1``'s plan: the running pass (its preemptions replayed, or the block boundary),
        the chunked prefill's next chunk, admissions. Returns it (None: decodes only) and the waiting."""
        plan = None
        if self.out is not None:  # the running pass preempts: replayed on the crossing decoders (preempt.py)
            plan, self.c0_sum, self.decoders, self.pages = preempt_pass(
                self.k, self.running, self.bucket, self.out, self.s, self.fin, self.buckets, self.c0_sum, self.decoders,
                self.pages, self.register if self.sync_reg else None)
        else:
            self.cross_boundary(s1)
        part = self.part
        if part is not None:  # its next chunk, after every decoder (running order)
            self.kv.allocate(part, n_part)
            plan = StepPlan(scheduled=[(part, n_part)])
            self.partial.discard(part.uid)
        nw, running, seqs = len(self.waiting), self.running, self.seqs
        if nw and self.out is None and not skip and (
                seqs.note(self.max_seqs - 1 - len(running)) if seqs is not None else len(running) < self.max_seqs):
            adm = plan if plan is not None else StepPlan()
            self.sched.admit(adm, self.max_batched - self.decoders - n_part, self.plan_t, self.k.step + self.lag)
            if adm.scheduled:
                plan, nw = adm, len(self.waiting)
        return plan, nw

    def launch(self, s1: int, plan: StepPlan | None) -> Any:
        """Step ``s1``'s batch and duration (``self.dt``): decodes only are timed as a quiet step is."""
        ctx = self.c0_sum + self.decoders * s1
        if plan is None or not plan.scheduled:  # (== step_cost, bit for bit)
            batch = self.decode_batch(ctx)
            self.dt = self.decode_time()(ctx, self.pages)
            return batch
        a = self.k.batch(plan)
        batch = new_batch((a.prefill_tokens, a.num_prefill_seqs, a.prefill_attn_pairs, a.prefill_context_tokens,
                           self.decoders + a.num_decode_seqs, ctx + a.decode_context_tokens,
                           self.pages + a.pages_touched, self.page, 0, a.swap_in_blocks, self.bb))  # swap-in: offload loads
        self.dt = self.step_cost(batch)
        return batch

    def join(self, s1: int, plan: StepPlan | None, end: float) -> list[Request]:
        """The planned requests advance (a completed prefill joins the decoders); those that
        sampled their last token leave them (real counts, running order). Returns those."""
        if plan is not None:
            c0_in, n_in, pages_in, self.part = join_planned(plan, end, self.lag, s1, self.fin, self.ends, self.buckets,
                                                            self.paged, self.partial)
            self.c0_sum, self.decoders, self.pages = self.c0_sum + c0_in, self.decoders + n_in, self.pages + pages_in
        self.s = s1
        done: list[Request] = self.fin.pop(s1, NONE)
        if done:
            done.sort(key=by_seq)
            gone_c0, gone_pages = dec.leave_all(done, self.buckets, s1, self.paged)  # (their real counts back)
            self.c0_sum, self.decoders, self.pages = self.c0_sum - gone_c0, self.decoders - len(done), self.pages - gone_pages
        return done
