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
step they leave the decoders and are finished exactly as ``Scheduler.update`` does (in running
order, which ``Request.seq`` records), and the window goes on.

One window serves sync and async scheduling; :mod:`sim.engine.fastforward.ordering` says how
the phases of a step (plan, launch, land) interleave. Under async scheduling a step is planned
while the previous one runs: a decoder's filled block is registered when it takes its next
block (one step late), and a request whose last token is in flight keeps its blocks and its
running slot until that step lands. The async window starts from, and hands back, the
:class:`~sim.engine.step.InFlight` step that the exact loop keeps between iterations.

Everything the exact path computes -- block ids and their order, hash registrations,
StepBatch integers, float sums of step times, per-step records -- is computed here in the
same order, so ``--exact-steps`` gives identical output (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from sim.cost import StepBatch
from sim.engine.fastforward.decoders import join, leave
from sim.engine.fastforward.ordering import Order
from sim.engine.step import InFlight, StepKernel
from sim.io.records import record_from_tuple as record
from sim.request import Request
from sim.sched.plan import StepPlan

new_batch = partial(tuple.__new__, StepBatch)  # StepBatch from a tuple in field order (hot path)
Pull = Callable[[float], None]          # take in the arrivals due at a time
NextArrival = Callable[[], float]       # a router's next possible submission
NO_PLAN = StepPlan()  # a window step that admitted nothing (read only: its record's zero counts)
NONE: list[Request] = []  # no request finishes in this step (read only)


def fast_forward(k: StepKernel, order: Order, t: float, flight: InFlight | None, pull_due: Pull,
                 next_arrival: NextArrival | None = None) -> tuple[float, InFlight | None]:
    """Run as many steps as can be done in bulk; return ``(time, step in flight)`` at the end.

    Sync: ``flight`` is None and the window starts at ``t``; it returns the time the next
    exact step starts (``t`` when nothing could be done in bulk). Async: ``flight`` is the step
    the exact loop just launched; it returns the step in flight at the end and its start
    (``flight`` itself when nothing could be done in bulk).

    ``pull_due(t)`` admits the arrivals due by ``t`` to the scheduler; ``next_arrival`` (a
    router's hint) stops the window before a step that a submission could change.

    Not in bulk: paper-v0's prefill-only steps, swapped requests waiting, and speculative
    decoding (a decode advances by its accepted drafts, 1 to K + 1 tokens a step, so decoders
    do not move in lockstep and the ``c0 mod B`` buckets below do not apply).
    """
    sched = k.sched
    if sched.swapped or not sched.mixed_steps or sched.spec_tokens or not sched.running:
        return t, flight
    decoding = order.decoding
    for r in sched.running:
        if not decoding(r):
            return t, flight
    return _window(k, order.lag, t, flight, pull_due, next_arrival)


def _window(k: StepKernel, lag: int, t: float, f: InFlight | None, pull_due: Pull,
            next_arrival: NextArrival | None) -> tuple[float, InFlight | None]:
    sched, kv = k.sched, k.kv
    running = sched.running
    max_batched, max_seqs = sched.max_num_batched_tokens, sched.max_num_seqs
    fin: dict[int, list[Request]] = {}  # window step -> requests whose last token it samples
    blocks = kv.decode_blocks  # None: a slab, no blocks to hand out mid-window
    paged = blocks is not None
    B, page = kv.block_size, k.page_size
    append_block = blocks.append_block if blocks is not None else None
    # a paged pool's counters read directly (== kv.num_free_blocks, no call)
    fq = blocks.pool.free_queue if blocks is not None else None
    caching = paged and kv.enable_caching
    register = blocks.register_decoded_blocks if blocks is not None and caching else None
    buckets: list[list[Request]] = [[] for _ in range(B)]
    c0_sum = pages = decoders = 0
    for r in running:
        left = r.output_tokens - r.num_output
        if not left:
            continue  # async: in f.done, skipped in the next plan, freed when f lands
        c0_sum += r.num_computed_tokens
        decoders += 1
        pages += join(r, left, fin, buckets, paged)
    step_cost, bb = k.cost.step_time, k.block_bytes
    # the step launched but not landed (p_*): async starts with f in flight
    landing = f is not None
    p_done: list[Request] = NONE
    if f is not None:
        p_plan, p_batch, p_dt, p_start = f.plan, f.batch, f.dt, f.start
        p_done = f.done if f.done is not None else NONE  # an async launch has sampled
        t = p_start + p_dt  # when the step in flight ends
    else:
        p_plan, p_batch, p_dt, p_start = NO_PLAN, new_batch((0,) * 11), 0.0, t
    partial: set[int] = set()
    s = 0
    while decoders:
        s1 = s + 1
        bucket = buckets[s1 % B] if paged else []
        if len(bucket) > (fq.size if fq is not None else kv.num_free_blocks) or decoders > max_batched:
            break  # this step could preempt, or not every decoder fits the budget: go exact
        plan_t = p_start if lag else t  # async: planned while the step in flight runs
        if next_arrival is not None and plan_t >= next_arrival():
            break  # a router may submit before this step is planned: let SimPy run it first
        # ---- plan step s1: arrivals, the running pass (decodes), admissions ----
        pull_due(plan_t)
        if bucket:
            append_block(bucket)  # type: ignore[misc]
            pages += len(bucket)
            if lag and register is not None:
                register(bucket, s1 - 1)  # the block their step-s token filled, seen now
        if not lag and register is not None:
            filling = buckets[(s1 + 1) % B]
            if filling:
                register(filling, s1)
        plan = None
        nw = sched.num_waiting
        if nw and len(running) < max_seqs:
            plan = StepPlan()
            sched.admit(plan, max_batched - decoders, plan_t, k.step + lag)
            if plan.scheduled:
                nw = sched.num_waiting
            else:
                plan = None
        if landing:  # async: step s lands at t, after step s1 was planned
            extra = sum(r.num_computed_tokens for r, _ in plan.scheduled) if plan is not None else 0
            _land(k, lag, caching, p_plan, p_batch, p_dt, p_start, p_done, c0_sum + decoders * s + extra, nw)
        # ---- launch step s1 at t: batch, duration, tokens computed and sampled ----
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
        if plan is not None:
            for r, n in plan.scheduled:
                if r.advance(n, end):
                    if lag:
                        r.pending_output = 1
                    left = r.output_tokens - r.num_output
                    r.num_computed_tokens -= s1  # join the decoders at virtual c0 = computed - s1
                    r.num_output -= s1
                    r.num_tokens -= s1
                    c0_sum += r.num_computed_tokens
                    decoders += 1
                    pages += join(r, s1 + left, fin, buckets, paged)
                else:
                    partial.add(r.uid)  # a chunked prefill remains: the next plan is exact
        s = s1
        done = fin.pop(s1, NONE)
        if done:  # sampled their last token: out of the decoders, real counts (in running order)
            done.sort(key=_seq)
            for r in done:
                c0_sum -= r.num_computed_tokens
                decoders -= 1
                pages -= leave(r, buckets, paged)
                r.num_computed_tokens += s1
                r.num_output += s1
                r.num_tokens += s1
        p_plan = plan if plan is not None else NO_PLAN
        p_batch, p_dt, p_start, p_done, t, landing = batch, dt, t, done, end, True
        if partial:
            break  # a chunked prefill remains: hand over to exact steps
        if not lag:  # sync: step s1 lands at its end, before step s1 + 1 is planned
            _land(k, lag, caching, p_plan, p_batch, p_dt, p_start, p_done, c0_sum + decoders * s, nw)
            landing = False
    if not s:
        return t if f is None else f.start, f
    real = partial | {r.uid for r in p_done} if landing else partial
    for r in running:
        if r.uid not in real:
            r.num_computed_tokens += s
            r.num_output += s
            r.num_tokens += s
    if not lag:
        if landing:  # a chunked prefill remains: the step lands with every count real
            _land(k, lag, caching, p_plan, p_batch, p_dt, p_start, p_done,
                  sum(r.num_computed_tokens for r in running if r not in p_done),
                  sched.num_waiting)
        return t, None
    return p_start, InFlight(StepPlan(scheduled=[(r, 1) for r in running], swap_in_blocks=p_plan.swap_in_blocks),
                             p_batch, p_dt, p_start, p_done)


def _land(k: StepKernel, lag: int, caching: bool, plan: StepPlan, batch: StepBatch, dt: float,
          start: float, done: list[Request], computed: int, nw: int) -> None:
    """The step ``(plan, batch, dt, start)`` lands: the requests whose last token it sampled
    (``done``) are freed, then its record; ``computed`` counts the running requests' token
    states once they are gone, ``nw`` the waiting requests."""
    if done:
        if lag:  # as AsyncScheduler.output: the token is seen, a block it filled is cached
            kv, B = k.kv, k.kv.block_size
            for r in done:
                r.pending_output = 0
                if caching and not r.num_computed_tokens % B:
                    kv.register_full_blocks(r, r.num_computed_tokens)
        k.finish(done, start + dt)
    sched, kv = k.sched, k.kv
    running = sched.running
    tok, res, internal, ext, free = kv.breakdown(running, computed, waiting=sched.waiting.peek() if nw else None)
    k.log.append(record((k.step, start, dt, len(running), nw, batch.prefill_tokens, batch.num_decode_seqs,
                         plan.num_preempted, kv.num_free_blocks, tok, res, internal, ext, free,
                         kv.shared_excess, plan.swap_out_blocks, plan.swap_in_blocks)))
    k.busy_s += dt
    k.step += 1
    k.ff_steps += 1


def _seq(r: Request) -> int:
    return r.seq
