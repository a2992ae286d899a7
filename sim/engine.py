"""The SimPy engine: one replica's step loop.

Each step: pull arrivals from the replica's inbox (``arrival_s <= now``), schedule, ask the
cost model for the step's duration, ``yield env.timeout(duration)``, apply the outcome. Requests
reach the inbox up front (a trace replay) or through ``submit`` (a router process in a fleet
replay). An idle engine waits on a timeout to its next known arrival OR a wake event that
``submit`` triggers; it never polls.

After each exact step the loop hands over to :mod:`sim.fastforward`, which applies runs of
steps in bulk with bit-identical results (``exact_steps=True`` turns it off).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import simpy

from sim.cost import StepBatch, StepCostModel
from sim.fastforward import fast_forward
from sim.kv.paged import PagedAllocator
from sim.kv.slab import SlabAllocator
from sim.records import StepLog
from sim.request import Request, Status
from sim.sched.scheduler import Scheduler, StepPlan


class Replica:
    """One serving instance: scheduler + allocator + cost model, driven by SimPy."""

    def __init__(
        self,
        env: simpy.Environment,
        sched: Scheduler,
        cost: StepCostModel,
        *,
        block_bytes: int = 0,
        exact_steps: bool = False,
        check: bool = False,
        reject: Callable[[Request], str] | None = None,
        on_step: Callable[[Replica], None] | None = None,
        on_progress: Callable[[Replica], None] | None = None,
    ) -> None:
        self.env, self.sched, self.kv, self.cost = env, sched, sched.kv, cost
        self.block_bytes = block_bytes
        self.exact_steps = exact_steps
        self.check = check
        self.reject = reject
        self.on_step = on_step
        self.on_progress = on_progress  # after every step or fast-forward window (cheap)
        self.inbox: list[Request] = []     # submitted requests, in arrival order
        self._cursor = 0
        self.log = StepLog()
        self.step = 0
        self.rejected: list[Request] = []
        self.finished: list[Request] = []
        self.next_arrival: Callable[[], float] = self._own_next_arrival
        self._wake: simpy.Event | None = None
        self.busy_s = 0.0
        self.ff_steps = 0
        self.process = env.process(self._loop())

    # ---- arrivals ---------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        self.inbox.append(req)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _own_next_arrival(self) -> float:
        return self.inbox[self._cursor].arrival_s if self._cursor < len(self.inbox) else math.inf

    def _pull(self, now: float, force: int = 0) -> None:
        inbox, sched = self.inbox, self.sched
        i = self._cursor
        while i < len(inbox) and (inbox[i].arrival_s <= now or i < force):
            r = inbox[i]
            reason = self.reject(r) if self.reject else ""
            if reason:
                r.status, r.reject_reason = Status.REJECTED, reason
                self.rejected.append(r)
            else:
                sched.add(r)
            i += 1
        self._cursor = i

    @property
    def outstanding_tokens(self) -> int:
        """Tokens still to process for queued + running requests (router signal)."""
        s = self.sched
        pend = sum(r.final_tokens for r in self.inbox[self._cursor:])
        return pend + sum(r.final_tokens - r.num_computed_tokens for r in s.running) + sum(
            r.final_tokens - r.num_computed_tokens for r in s.waiting)

    # ---- the loop ---------------------------------------------------------------------------
    def _loop(self) -> Generator[simpy.Event, Any, None]:
        env, sched = self.env, self.sched
        while True:
            self._pull(env.now)
            if not sched.running and sched.num_waiting == 0:
                self._wake = env.event()
                if self._cursor < len(self.inbox):  # a future arrival from our own trace
                    nxt = self._cursor
                    yield env.timeout(max(self.inbox[nxt].arrival_s - env.now, 0.0)) | self._wake
                    self._wake = None
                    self._pull(env.now, force=nxt + 1)
                else:
                    yield self._wake
                    self._wake = None
                    continue
            now = env.now
            plan = sched.schedule(now, self.step)
            if not plan.scheduled and not sched.running:
                if sched.num_waiting:  # nothing can ever run: reject the head, keep going
                    self._reject_head()
                continue
            batch = self._batch(plan)
            dt = self.cost.step_time(batch)
            yield env.timeout(dt)
            end = env.now
            self.busy_s += dt
            finished = sched.update(plan, end, self.step)
            self.finished.extend(finished)
            self._record(now, dt, plan, batch)
            if self.check:
                self.kv.check(self._live())
            if self.on_step:
                self.on_step(self)
            self.step += 1
            if self.on_progress:
                self.on_progress(self)
            if not self.exact_steps:
                t = fast_forward(self, env.now)
                if t > env.now:
                    if self.on_progress:
                        self.on_progress(self)
                    yield from self._sleep_until(t)
                    if self.check:
                        self.kv.check(self._live())

    def _sleep_until(self, t: float) -> Generator[simpy.Event, Any, None]:
        """Advance SimPy time to exactly ``t`` (the fast-forward's float sum of step times).

        ``now + (t - now)`` is not always ``t`` in floating point when ``t > 2 now``; a hop to
        the midpoint first makes the second difference exact (Sterbenz), so the clock lands
        on the same float an exact step-by-step run reaches.
        """
        env = self.env
        if env.now + (t - env.now) != t:
            yield env.timeout((t - env.now) / 2)
        yield env.timeout(t - env.now)
        assert env.now == t, (env.now, t)

    def _live(self) -> list[Request]:
        return list(self.sched.running)

    def _reject_head(self) -> None:
        s = self.sched
        r = s._peek()
        assert r is not None
        s._pop()
        r.status, r.reject_reason = Status.REJECTED, "cannot be scheduled: does not fit the KV pool"
        self.rejected.append(r)

    # ---- step description and records -------------------------------------------------------
    def _batch(self, plan: StepPlan) -> StepBatch:
        B = self.kv.block_size
        pf_tok = pf_seqs = pf_ctx = dec = dec_ctx = pages = 0
        pairs = 0.0
        riders = plan.free_riders
        for r, n in plan.scheduled:
            if riders and r.uid in riders:
                continue  # forked group member: the leader's prefill computed its KV
            c = r.num_computed_tokens
            ctx = c + n
            if n == 1 and r.num_output and c == r.num_tokens - 1:
                dec += 1
                dec_ctx += ctx
            else:
                pf_tok += n
                pf_seqs += 1
                pf_ctx += ctx
                pairs += n * (2 * c + n + 1) / 2
            if B:
                pages += -(-ctx // B)
        return StepBatch(pf_tok, pf_seqs, pairs, pf_ctx, dec, dec_ctx, pages, B,
                         plan.swap_out_blocks, plan.swap_in_blocks, self.block_bytes)

    def _breakdown(self) -> tuple[int, int, int, int, int]:
        kv = self.kv
        if isinstance(kv, SlabAllocator):
            return kv.breakdown(self.sched.running)
        if self.sched.fork_cow:
            return kv.exact_breakdown(self.sched.running)
        return self._paged_breakdown(sum(r.num_computed_tokens for r in self.sched.running))

    def _paged_breakdown(self, comp: int) -> tuple[int, int, int, int, int]:
        kv = self.kv
        assert isinstance(kv, PagedAllocator)
        B = kv.block_size
        free = kv.free_queue.size
        used = kv.usable_blocks - free
        held = (used + kv.shared_excess) * B
        internal = held - comp
        tok = used * B - internal
        null = (kv.num_blocks - kv.usable_blocks) * B
        return tok, 0, internal, null, free * B

    def _record(self, start: float, dt: float, plan: StepPlan, batch: StepBatch) -> None:
        pf, dec = batch.prefill_tokens, batch.num_decode_seqs
        free_blocks = self.kv.num_free_blocks
        tok, res, internal, ext, free = self._breakdown()
        self.log.row(self.step, start, dt, len(self.sched.running), self.sched.num_waiting, pf, dec,
                     plan.num_preempted, free_blocks, tok, res, internal, ext, free,
                     self.kv.shared_excess, plan.swap_out_blocks, plan.swap_in_blocks)

    def _finish_bulk(self, end: float) -> None:
        """Finish the requests whose last token was sampled in the step ending at ``end``."""
        sched = self.sched
        finished = [r for r in sched.running if r.num_output >= r.output_tokens]
        if not finished:
            return
        sched.running = [r for r in sched.running if r.num_output < r.output_tokens]
        for r in finished:
            self.kv.free(r)
            r.status = Status.FINISHED
            r.finish_s, r.finish_step = end, self.step
        self.finished.extend(finished)
