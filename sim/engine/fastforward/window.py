"""Decode fast-forward: apply runs of steps in bulk, bit-identical to stepping one at a time.

In steady state most running requests are decoding: each step adds one token to each, and
the only per-request events are (a) crossing a block boundary (a new block every B steps),
(b) filling a block (its hash is registered), (c) finishing. Instead of touching every
request every step, decoders keep their token counts at a *virtual* start value ``c0`` (the
count they would have had at the start of the window) and are bucketed by ``c0 mod B``::

    step s of the window: a decoder needs a block   iff (c0 + s - 1) % B == 0
                          its last block fills      iff (c0 + s) % B == 0

so a step costs O(requests with an event), not O(batch). Admissions of waiting requests run
through the scheduler's own admission pass on the real (eagerly updated) block pool, so they are
simulated exactly; a new request whose prefill completes joins the decoders. The window ends
(before the step) when a step could preempt (its block needs exceed the free blocks) or the
token budget could not cover every decoder, and (after the step) when a chunked prefill
remains. Requests are also bucketed by the step that samples their last token; in that
step they are materialised and finished exactly as ``Scheduler.update`` does (in running
order, which ``Request.seq`` records), and the window goes on.

Everything the exact path computes -- block ids and their order, hash registrations,
StepBatch integers, float sums of step times, per-step records -- is computed here in the
same order, so ``--exact-steps`` gives identical output (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from sim.cost import StepBatch
from sim.engine.fastforward.decoders import join, leave
from sim.engine.step import StepKernel
from sim.io.records import record_from_tuple as record
from sim.request import Request
from sim.sched.plan import StepPlan

new_batch = partial(tuple.__new__, StepBatch)  # StepBatch from a tuple in field order (hot path)
Pull = Callable[[float], None]          # take in the arrivals due at a time
NextArrival = Callable[[], float]       # a router's next possible submission


def fast_forward(k: StepKernel, t: float, pull_due: Pull, next_arrival: NextArrival | None = None) -> float:
    """Run as many steps as can be done in bulk, starting at time ``t``; return the end time.

    ``pull_due(t)`` admits the arrivals due by ``t`` to the scheduler; ``next_arrival`` (a
    router's hint) stops the window before a step that a submission could change. A live router
    also reads replica state at its next arrival, so no step of the window may end at or after
    it: the step that would straddle it is planned here and handed to the exact loop as
    ``k.pending`` (planned as ``sched.schedule`` would have, its outcome not applied).

    Not in bulk: paper-v0's prefill-only steps, swapped requests waiting, and speculative
    decoding (a decode advances by its accepted drafts, 1 to K + 1 tokens a step, so decoders
    do not move in lockstep and the ``c0 mod B`` buckets below do not apply).
    """
    sched = k.sched
    if sched.swapped or not sched.mixed_steps or sched.spec_tokens:
        return t
    return _window(k, t, pull_due, next_arrival)


def _window(k: StepKernel, t: float, pull_due: Pull, next_arrival: NextArrival | None) -> float:
    """One window from materialised state; returns its end time."""
    sched, kv = k.sched, k.kv
    running = sched.running
    R = len(running)
    max_batched = sched.max_num_batched_tokens
    if R == 0 or max_batched < R:
        return t
    fin: dict[int, list[Request]] = {}  # window step -> requests whose last token it samples
    for r in running:
        if r.num_tokens - r.num_computed_tokens != 1 or not r.num_output:
            return t
    blocks = kv.decode_blocks  # None: a slab, no blocks to hand out mid-window
    paged = blocks is not None
    B = kv.block_size
    page = k.page_size
    append_block = blocks.append_block if blocks is not None else None
    # a paged pool's counters read directly (== kv.num_free_blocks / kv.shared_excess, no call)
    pool = blocks.pool if blocks is not None else None
    fq = pool.free_queue if pool is not None else None
    register = blocks.register_decoded_blocks if blocks is not None and kv.enable_caching else None
    buckets: list[list[Request]] = [[] for _ in range(B)]
    c0_sum = 0
    pages = 0
    for r in running:
        c0_sum += r.num_computed_tokens
        pages += join(r, r.output_tokens - r.num_output, fin, buckets, paged)
    decoders = R                      # requests in the virtual representation
    step_cost, log_row, bb = k.cost.step_time, k.log.append, k.block_bytes
    max_seqs = sched.max_num_seqs
    breakdown, peek = kv.breakdown, sched.waiting.peek  # no swapped requests in a window
    na = next_arrival() if next_arrival is not None else math.inf  # no submission until the window ends
    s = 0
    while decoders:
        s1 = s + 1
        bucket = buckets[s1 % B] if paged else []
        if len(bucket) > (fq.size if fq is not None else kv.num_free_blocks) or decoders > max_batched:
            break  # this step could preempt, or not every decoder fits the budget: go exact
        if t >= na:
            break  # a router may submit before this step starts: let SimPy run it first
        # ---- step s1: arrivals, the running pass (decodes), admissions ----
        pull_due(t)
        if bucket:
            append_block(bucket)  # type: ignore[misc]
            pages += len(bucket)
        if register is not None:
            filling = buckets[(s1 + 1) % B]
            if filling:
                register(filling, s1)
        plan = None
        nw = sched.num_waiting
        if nw and len(running) < max_seqs:
            plan = StepPlan()
            sched.admit(plan, max_batched - decoders, t, k.step)
            if plan.scheduled:
                nw = sched.num_waiting
            else:
                plan = None
        ctx = c0_sum + decoders * s1
        if plan is None:
            batch = new_batch((0, 0, 0.0, 0, decoders, ctx, pages, page, 0, 0, bb))
        else:
            a = k.batch(plan)
            batch = new_batch((a.prefill_tokens, a.num_prefill_seqs, a.prefill_attn_pairs,
                               a.prefill_context_tokens, decoders + a.num_decode_seqs,
                               ctx + a.decode_context_tokens, pages + a.pages_touched,
                               page, 0, a.swap_in_blocks, bb))  # swap-in: CPU offload loads
        dt = step_cost(batch)
        end = t + dt
        if end >= na:  # the router reads this step mid-flight: the exact loop runs it
            _materialise(running, s, {r.uid for r, _ in plan.scheduled} if plan is not None else set())
            k.pending = _pending_plan(running, plan)
            return t
        # ---- outcome ----
        partial: set[int] = set()
        if plan is not None:
            for r, n in plan.scheduled:
                if r.advance(n, end):
                    left = r.output_tokens - r.num_output
                    # join the decoders at virtual start c0 = computed - s1
                    r.num_computed_tokens -= s1
                    r.num_output -= s1
                    r.num_tokens -= s1
                    c0_sum += r.num_computed_tokens
                    decoders += 1
                    pages += join(r, s1 + left, fin, buckets, paged)
                else:
                    partial.add(r.uid)  # a chunked prefill remains: the next step is exact
        s = s1
        if partial:  # a chunked prefill remains: materialise, finish, hand over to exact steps
            _materialise(running, s, partial)
            k.finish([r for r in running if r.num_output >= r.output_tokens], end)
            k.record(t, dt, plan if plan is not None else StepPlan(), batch)
            k.ff_steps += 1
            return end
        done = fin.pop(s1, None)
        if done:
            # finish as the exact path does: in running order, freeing each request's blocks
            done.sort(key=_seq)
            for r in done:
                c0_sum -= r.num_computed_tokens
                decoders -= 1
                pages -= leave(r, buckets, paged)
                r.num_computed_tokens += s1
                r.num_output += s1
                r.num_tokens += s1
            k.finish(done, end)
        tok, res, internal, ext, free = breakdown(running, c0_sum + decoders * s,
                                                  waiting=peek() if nw else None)
        log_row(record((k.step, t, dt, len(running), nw, batch.prefill_tokens,
                        batch.num_decode_seqs, 0, fq.size if fq is not None else kv.num_free_blocks,
                        tok, res, internal, ext, free,
                        pool.shared_excess if pool is not None else kv.shared_excess, 0, batch.swap_in_blocks)))
        t = end
        k.busy_s += dt
        k.step += 1
        k.ff_steps += 1
    if s:
        _materialise(running, s, set())
    return t


def _pending_plan(running: list[Request], admitted: StepPlan | None) -> StepPlan:
    """The plan ``sched.schedule`` returns for a window step: every decoder one token (running
    order), then the admissions."""
    if admitted is None:
        return StepPlan(scheduled=[(r, 1) for r in running])
    new = {r.uid for r, _ in admitted.scheduled}
    admitted.scheduled[:0] = [(r, 1) for r in running if r.uid not in new]
    return admitted


def _seq(r: Request) -> int:
    return r.seq


def _materialise(running: list[Request], s: int, real: set[int]) -> None:
    """Turn virtual counts into real ones (``+ s``); ``real`` holds requests already real."""
    for r in running:
        if r.uid in real:
            continue
        r.num_computed_tokens += s
        r.num_output += s
        r.num_tokens += s
