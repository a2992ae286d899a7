"""Decode fast-forward under async scheduling, bit-identical to stepping one at a time.

The same bulk representation as :mod:`sim.engine.fastforward.window` (decoders at a virtual start ``c0``,
bucketed by ``c0 mod B``), shifted to async scheduling's order (:mod:`sim.sched.async_scheduler`)::

    exact loop, one iteration                      window step s (step s-1 in flight from t_prev)
    pull arrivals <= start of the step in flight   pull_due(t_prev)
    plan step s: decodes, admissions               blocks for bucket s; admissions at t_prev
    step s-1 lands: output seen, finishes, record  its finished requests freed, its record
    step s launched: batch, duration, update       batch, dt; admissions advance; step s's
                                                   finishers leave the decoders, freed next step

Two things differ from the sync window. A decoder's filled block is registered one step late
(the token in flight is not seen), so the block a bucket-``s`` decoder filled at step ``s - 1``
is registered when it takes its next block. And a request whose last token step ``s`` samples
keeps its blocks and its running slot while step ``s + 1`` is planned (it is skipped, not
scheduled), and is freed when step ``s`` lands.

The window hands back an :class:`~sim.engine.step.InFlight` -- the state the exact loop keeps between
iterations -- with every count materialised. It starts from one the exact loop launched, and
only when every running request is a decoder sampling in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sim.engine.fastforward.decoders import join, leave
from sim.engine.fastforward.window import _seq, new_batch
from sim.engine.step import InFlight, StepKernel
from sim.io.records import record_from_tuple as record
from sim.request import Request
from sim.sched.plan import StepPlan

Pull = Callable[[float], None]
NextArrival = Callable[[], float]
NO_PLAN = StepPlan()  # a window step that admitted nothing (read only: its record's zero counts)
NONE: list[Request] = []  # no request finishes in this step (read only)


def fast_forward_async(k: StepKernel, f: InFlight, pull_due: Pull,
                       next_arrival: NextArrival | None = None) -> InFlight:
    """Run steps in bulk from the step ``f`` just launched; return the step in flight at the end
    (``f`` itself when nothing could be done in bulk)."""
    sched = k.sched
    if sched.swapped or not sched.mixed_steps or sched.spec_tokens or not sched.running:
        return f
    for r in sched.running:
        if r.num_tokens - r.num_computed_tokens != 1 or not r.num_output or not r.pending_output:
            return f
    return _window(k, f, pull_due, next_arrival)


def _window(k: StepKernel, f: InFlight, pull_due: Pull, next_arrival: NextArrival | None) -> InFlight:
    sched, kv = k.sched, k.kv
    running = sched.running
    max_batched, max_seqs = sched.max_num_batched_tokens, sched.max_num_seqs
    fin: dict[int, list[Request]] = {}  # window step -> requests whose last token it samples
    blocks = kv.decode_blocks  # None: a slab, no blocks to hand out mid-window
    paged = blocks is not None
    B, page = kv.block_size, k.page_size
    append_block = blocks.append_block if blocks is not None else None
    pool = blocks.pool if blocks is not None else None
    fq = pool.free_queue if pool is not None else None
    caching = paged and kv.enable_caching
    register = blocks.register_decoded_blocks if blocks is not None and caching else None
    buckets: list[list[Request]] = [[] for _ in range(B)]
    c0_sum = pages = decoders = 0
    for r in running:
        left = r.output_tokens - r.num_output
        if not left:
            continue  # in f.done: skipped in the next plan, freed when f lands
        c0_sum += r.num_computed_tokens
        decoders += 1
        pages += join(r, left, fin, buckets, paged)
    step_cost, log_row, bb = k.cost.step_time, k.log.append, k.block_bytes
    breakdown, peek = kv.breakdown, sched.waiting.peek
    prev_plan, prev_batch, dt_prev, t_prev, pend_done = f.plan, f.batch, f.dt, f.start, f.done
    na = next_arrival() if next_arrival is not None else math.inf  # no submission until the window ends
    t = t_prev + dt_prev  # when the step in flight ends
    partial: set[int] = set()
    s = 0
    while decoders:
        s1 = s + 1
        bucket = buckets[s1 % B] if paged else []
        if len(bucket) > (fq.size if fq is not None else kv.num_free_blocks) or decoders > max_batched:
            break  # planning this step could preempt, or not every decoder fits the budget
        if t >= na:
            # the step in flight ends at or after the router's next arrival, which reads replica
            # state mid-flight (step s running, step s1 planned): the exact loop plans s1
            break
        # ---- plan step s1 while step s runs (arrivals by t_prev; step s's tokens unseen) ----
        pull_due(t_prev)
        if bucket:
            append_block(bucket)  # type: ignore[misc]
            pages += len(bucket)
            if register is not None:
                register(bucket, s1 - 1)  # the block their step-s token filled, seen now
        plan = None
        nw = sched.num_waiting
        if nw and len(running) < max_seqs:
            plan = StepPlan()
            sched.admit(plan, max_batched - decoders, t_prev, k.step + 1)
            if plan.scheduled:
                nw = sched.num_waiting
            else:
                plan = None
        # ---- step s lands at t: its finished requests are freed, its record ----
        if pend_done:
            for r in pend_done:
                r.pending_output = 0
                if caching and not r.num_computed_tokens % B:  # as AsyncScheduler.output
                    kv.register_full_blocks(r, r.num_computed_tokens)
            k.finish(pend_done, t)
        computed = c0_sum + decoders * s
        if plan is not None:
            computed += sum(r.num_computed_tokens for r, _ in plan.scheduled)
        tok, res, internal, ext, free = breakdown(running, computed, waiting=peek() if nw else None)
        log_row(record((k.step, t_prev, dt_prev, len(running), nw, prev_batch.prefill_tokens,
                        prev_batch.num_decode_seqs, prev_plan.num_preempted,
                        fq.size if fq is not None else kv.num_free_blocks, tok, res, internal, ext, free,
                        pool.shared_excess if pool is not None else kv.shared_excess,
                        prev_plan.swap_out_blocks, prev_plan.swap_in_blocks)))
        k.busy_s += dt_prev
        k.step += 1
        k.ff_steps += 1
        # ---- step s1 launched at t: batch, duration, tokens computed and sampled ----
        ctx = c0_sum + decoders * s1
        if plan is None:
            batch = new_batch((0, 0, 0.0, 0, decoders, ctx, pages, page, 0, 0, bb))
        else:
            a = k.batch(plan)
            batch = new_batch((a.prefill_tokens, a.num_prefill_seqs, a.prefill_attn_pairs,
                               a.prefill_context_tokens, decoders + a.num_decode_seqs,
                               ctx + a.decode_context_tokens, pages + a.pages_touched,
                               page, 0, a.swap_in_blocks, bb))
        dt = step_cost(batch)
        end = t + dt
        if plan is not None:
            for r, n in plan.scheduled:
                if r.advance(n, end):
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
        if done:  # sampled their last token: out of the decoders, real counts, freed when s1 lands
            done.sort(key=_seq)
            for r in done:
                c0_sum -= r.num_computed_tokens
                decoders -= 1
                pages -= leave(r, buckets, paged)
                r.num_computed_tokens += s1
                r.num_output += s1
                r.num_tokens += s1
        prev_plan = plan if plan is not None else NO_PLAN
        prev_batch, dt_prev, t_prev, t, pend_done = batch, dt, t, end, done
        if partial:
            break
    if not s:
        return f
    real = partial | {r.uid for r in pend_done}
    for r in running:
        if r.uid not in real:
            r.num_computed_tokens += s
            r.num_output += s
            r.num_tokens += s
    return InFlight(StepPlan(scheduled=[(r, 1) for r in running], swap_in_blocks=prev_plan.swap_in_blocks),
                    prev_batch, dt_prev, t_prev, pend_done)
