"""The SimPy engine: one replica's step loop, an arrival process, and decode fast-forward.

Each step: pull arrivals (``arrival_s <= now``), schedule, ask the cost model for the step's
duration, ``yield env.timeout(duration)``, apply the outcome. An idle engine waits on an event
that the arrival process triggers; it never polls.

Fast-forward (the default; ``exact_steps=True`` turns it off): when every running request is
decoding and the batch's composition cannot change for K steps (no finish, no admission
possible, enough free blocks for the K steps' block-boundary allocations), the K steps are
applied in bulk -- same block ids in the same order, same per-step records, same float sums
-- so results are bit-identical to stepping one at a time (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import simpy

from sim.cost import StepBatch, StepCostModel
from sim.kv.paged import PagedAllocator
from sim.kv.slab import SlabAllocator
from sim.records import StepLog
from sim.request import Request, Status
from sim.sched.scheduler import Scheduler, StepPlan

MIN_FF_STEPS = 1


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
    ) -> None:
        self.env, self.sched, self.kv, self.cost = env, sched, sched.kv, cost
        self.block_bytes = block_bytes
        self.exact_steps = exact_steps
        self.check = check
        self.reject = reject
        self.on_step = on_step
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
            if not self.exact_steps and not finished and not plan.num_preempted:
                yield from self._fast_forward()

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

    # ---- fast-forward -----------------------------------------------------------------------
    def _fast_forward(self) -> Generator[simpy.Event, Any, None]:
        """Apply a run of decode-only steps in bulk; see the module docstring."""
        sched, kv, env = self.sched, self.kv, self.env
        running = sched.running
        R = len(running)
        if R == 0 or sched.swapped or not sched.chunked_prefill or sched.max_num_batched_tokens < R:
            return
        min_left = math.inf
        for r in running:
            if r.num_tokens - r.num_computed_tokens != 1 or not r.num_output:
                return
            left = r.output_tokens - r.num_output
            if left < min_left:
                min_left = left
        max_k = int(min_left)              # the last step may finish requests
        if max_k < MIN_FF_STEPS:
            return
        paged = isinstance(kv, PagedAllocator)
        B = kv.block_size if paged else 0
        # block-boundary buckets: request r allocates at FF step s iff (c_r + s - 1) % B == 0
        buckets: list[list[Request]] = [[] for _ in range(B)] if paged else []
        if paged:
            for r in running:
                buckets[(1 - r.num_computed_tokens) % B].append(r)
        # can the waiting head be admitted (now, or at any step of the window)?
        admit_blocked = self._admission_blocked(len(buckets[1 % B]) if paged else 0)
        horizon = math.inf if admit_blocked else self.next_arrival()
        free0 = kv.num_free_blocks
        comp0 = sum(r.num_computed_tokens for r in running)
        ctx = comp0
        pages = sum(len(r.blocks) for r in running) if paged else 0
        t = env.now
        step_cost, log, block_bytes = self.cost.step_time, self.log, self.block_bytes
        need_total = 0
        k = 0
        applied = False
        slab_bd = kv.breakdown(running) if isinstance(kv, SlabAllocator) else None
        while k < max_k:
            s = k + 1
            if t >= horizon:
                break
            need = len(buckets[s % B]) if paged else 0
            if need_total + need > free0:
                break
            if admit_blocked and self.next_arrival() <= t:
                self._pull(t)
            # ---- step s ----
            if need:
                new = kv.get_new_blocks(need)  # type: ignore[union-attr]
                for r, b in zip(buckets[s % B], new, strict=True):
                    r.blocks.append(b)
            need_total += need
            pages += need
            ctx += R
            dt = step_cost(StepBatch(0, 0, 0.0, 0, R, ctx, pages, B, 0, 0, block_bytes))
            if paged and kv.enable_caching:  # type: ignore[union-attr]
                # (c_r + s) % B == 0: this step's token fills r's last block -> register it
                for r in buckets[(s + 1) % B]:
                    kv._register(r, r.num_computed_tokens + s)  # type: ignore[union-attr]
            if s == max_k:
                # the last step finishes requests: materialise the window, then finish as update() does
                for r in running:
                    r.num_computed_tokens += s
                    r.num_output += s
                    r.num_tokens += s
                applied = True
                self._finish_bulk(t + dt)
                bd = self._breakdown()
                n_run = len(sched.running)
            elif paged:
                bd = self._paged_breakdown(ctx)
                n_run = R
            else:
                tok0, res0, internal, ext, fr = slab_bd  # type: ignore[misc]
                bd = (tok0 + s * R, res0 - s * R, internal, ext, fr)
                n_run = R
            log.row(self.step, t, dt, n_run, sched.num_waiting, 0, R, 0,
                    kv.num_free_blocks, *bd, kv.shared_excess, 0, 0)
            t += dt
            self.busy_s += dt
            self.step += 1
            k = s
        if k == 0:
            return
        if not applied:
            for r in running:
                r.num_computed_tokens += k
                r.num_output += k
                r.num_tokens += k
        self.ff_steps += k
        delay = t - env.now
        while env.now + delay < t:
            delay = math.nextafter(delay, math.inf)
        while env.now + delay > t:
            delay = math.nextafter(delay, -math.inf)
        yield env.timeout(delay)
        if self.check:
            kv.check(self._live())

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

    def _admission_blocked(self, first_step_need: int) -> bool:
        """True if no waiting request can be admitted at any step of a decode-only window."""
        sched, kv = self.sched, self.kv
        R = len(sched.running)
        if sched.max_num_seqs <= R or sched.max_num_batched_tokens - R <= 0:
            return True
        head = sched._peek()
        if head is None or sched.priority:
            return False  # an arrival may be admitted (or jump the priority queue)
        if isinstance(kv, SlabAllocator):
            return kv.chunk_slots(head) > kv.placement.largest_free()
        hits = kv.get_computed_blocks(head) if head.num_computed_tokens == 0 else []
        n = head.num_tokens - len(hits) * kv.block_size
        n = min(n, sched.max_num_batched_tokens - R)
        return kv.can_allocate(head, n, hits, full_sequence_must_fit=sched.reserve_full_isl,
                               apply_watermark=True,
                               free=kv.free_queue.size - first_step_need) < 0
