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

from sim.engine.fastforward import decoders as dec
from sim.engine.fastforward.chunked import carried, next_chunk
from sim.engine.fastforward.decoders import boundary, by_seq, index, join_planned, nearest, uids
from sim.engine.fastforward.handover import close, hand_over
from sim.engine.fastforward.lockstep import Polls, Sleep
from sim.engine.fastforward.ordering import Order
from sim.engine.fastforward.pause import Pausing, never, pause
from sim.engine.fastforward.preempt import preempt_pass, supported, victims
from sim.engine.fastforward.quiet_steps import bind
from sim.engine.fastforward.runs import QuietRuns
from sim.engine.fastforward.steps import NO_PLAN, NONE, NextArrival, Pull, Window, land, new_batch
from sim.engine.step import InFlight, StepKernel
from sim.request import Request
from sim.sched.plan import StepPlan

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
    return _window(k, order.lag, t, flight, pull_due, next_arrival, next_due, pausable, real_counts, part, lazy, polls)


def _window(k: StepKernel, lag: int, t: float, f: InFlight | None, pull_due: Pull,
            next_arrival: NextArrival | None, next_due: NextArrival | None, pausable: bool,
            real_counts: bool, part: Request | None, lazy: bool, polls: Polls | None) -> Window:
    sched, kv = k.sched, k.kv
    running, waiting = sched.running, sched.waiting
    max_batched, max_seqs, seqs = sched.max_num_batched_tokens, sched.max_num_seqs, sched.seq_margin
    fin: dict[int, list[Request]] = {}  # window step -> requests whose last token it samples
    ends: list[int] = []  # fin's keys, a heap (decoders.nearest)
    blocks = k.decode_blocks  # None: a slab, no blocks to hand out mid-window
    B, page, caching, paged = kv.block_size, k.page_size, k.caching, blocks is not None
    cross, pool = (blocks.cross_boundary, blocks.pool) if blocks is not None else (None, None)
    fq = pool.free_queue if pool is not None else None  # read directly (== kv.num_free_blocks)
    margin = kv.headroom  # the decoders' block checks, noted as their allocations would be
    register = blocks.register_decoded_blocks if blocks is not None and caching else None
    sync_reg = paged and not lag and register is not None  # sync: blocks are registered as they fill
    lin = blocks.linear_breakdown() if blocks is not None else None
    usable, nulls = (lin.usable, lin.null_slots) if lin is not None else (0, 0)
    preempts = supported(k, lin is not None)  # a step that preempts stays in the window (preempt.py)
    buckets: list[list[Request]] = [[] for _ in range(B)]
    c0_sum, decoders, pages = index(running, part, fin, ends, buckets, paged)
    step_cost, bb, breakdown, log_row = k.cost.step_time, k.block_bytes, kv.breakdown, k.log.append
    own, router = next_due or never, next_arrival or never  # the replica's own inbox's next arrival; a router's
    quiet, due = next_due is not None, own() if next_due is not None else 0.0
    held: int | None = None  # truthy: no admission can run until a pull or a non-quiet step (2: nor a run)
    head: Request | None = None
    qnw, s, dt, log, progress, dec_time, dec_n, busy = 0, 0, 0.0, k.log, k.progress, k.decode_time(decoders), decoders, False
    na = router()  # no submission until the window ends
    landing, p_done = f is not None, NONE  # the step launched, not landed (p_*): async starts with f
    if f is not None:
        p_plan, p_batch, p_dt, p_start = f.plan, f.batch, f.dt, f.start
        p_done = f.done if f.done is not None else NONE  # an async launch has sampled
        t = p_start + p_dt  # when the step in flight ends
    else:
        p_plan, p_batch, p_dt, p_start = NO_PLAN, new_batch((0,) * 11), 0.0, t
    partial: set[int] = {part.uid} if part is not None else set()  # chunked prefills (real counts)
    cap = PROGRESS_EVERY if progress is not None else math.inf  # records before the next progress call
    runs = QuietRuns(k, lag, buckets, (usable, nulls), register, cross,
                     Pausing(running, router, own, real_counts, lazy)
                     if pausable else None) \
        if lin is not None and quiet and cross is not None and polls is None else None
    quick = None if polls is not None else bind(  # (lockstep: one step at a time; busy: a poll wants the pass)
        k, lag, buckets, fin, ends, register, lin, runs.min_run if runs is not None else -1, pausable, pull_due, next_due)
    while decoders:
        s1 = s + 1
        if progress is not None and len(log) >= cap:  # a long window drains its records (bounded memory)
            progress()
            cap = len(log) + PROGRESS_EVERY
        bucket = buckets[s1 % B] if paged else []
        if polls is not None:  # first, as Scheduler.schedule (a step then handed back is not polled twice)
            busy = polls(p_start if lag else t, s1)
            held = None if busy else held
        slack = (fq.size if fq is not None else kv.num_free_blocks) - len(bucket)
        out = None  # the running pass's victims when this step preempts
        if decoders > max_batched or (slack < 0 and (
                not preempts or pool is None or part is not None  # (preempts: paged, so a pool)
                or (out := victims(running, bucket, p_done, pool.free_queue.size, pool.ref, decoders)) is None)):
            break  # not every decoder fits the budget, or a step that preempts is not the window's: go exact
        if out is None and bucket and margin is not None and slack < margin.pass_min:
            margin.pass_min = slack  # the decoders' block checks (== margin.note), inline
        plan_t = p_start if lag else t  # async: planned while the step in flight runs
        if t >= na and not (lag and pausable):  # (async, pausable: it waits after the plan below)
            # sync: a router may submit before this step starts; async: the step in flight ends at or after
            # the router's next arrival, which reads it mid-flight: let SimPy run it, the exact loop plans s1
            break
        if quiet and s1 not in fin and not (landing and p_done) and part is None and out is None and not busy:
            # ---- a quiet step: nothing finishes, nothing is freed, and no admission can run ----
            if due <= plan_t:  # an arrival is due: pull it (it may change what admission sees)
                pull_due(plan_t)
                due = own()
                held = None
            if held is None:
                qnw = len(waiting)  # == sched.num_waiting: nothing is swapped in a window
                head = waiting.peek() if qnw else None
                held = sched.admits_nothing(head, max_batched - decoders)
            if held:
                if held is True and runs is not None and due - plan_t >= runs.min_run * dt and (  # (else ready() says no: a guess,
                        not lag or (p_plan is NO_PLAN and p_batch.num_decode_seqs == decoders)):  # dt grows in a run)
                    if nearest(fin, ends) - s1 >= runs.min_run and pool is not None and runs.ready(  # (runs: paged)
                            s, t, decoders, c0_sum, pages, fin, due, na, p_start, p_dt, qnw, len(running), pool.shared_excess):
                        n = yield from runs.take(s, due, na, p_start, cap - len(log))
                        if n:  # a run of quiet steps, as arrays (sim/engine/fastforward/runs.py)
                            s, t, pages, due, na, p_dt, p_start = s + n, runs.t, runs.pages, runs.due, runs.na, runs.p_dt, runs.p_start
                            p_batch = new_batch((0, 0, 0.0, 0, decoders, runs.ctx, pages, page, 0, 0, bb))
                            continue
                    else:
                        held = 2  # nor a run until what ready() reads changes (a pull, a pause, a non-quiet step)
                if quick is not None and (t if lag else t + dt) < na:  # quiet steps in one call (quiet_steps.py); no router read first?
                    n, s, t, pages, dt, p_plan, p_batch, p_dt, p_start, due, held, qnw, head = quick.take(
                        s, t, pages, c0_sum, decoders, dt, p_plan, p_batch, p_dt, p_start, qnw, head, len(running), due, na, held, cap - len(log))
                    if n:
                        continue
                if bucket or (sync_reg and buckets[(s1 + 1) % B]):  # else boundary() does nothing
                    pages += boundary(buckets, s1, lag, cross, register) if quick is None else quick.boundary(s1)
                if dec_n != decoders:
                    dec_time, dec_n = k.decode_time(decoders), decoders
                ctx = c0_sum + decoders * s1
                dt = dec_time(ctx, pages)
                end = t if lag else t + dt  # the step in flight at the router's read ends then
                if end >= na:  # the router reads this step mid-flight (async: only if pausable)
                    if not pausable:
                        hand_over(k, running, s, None)
                        return t, None
                    na = yield from pause(k, running, s, (), end, na, router, real_counts)
                    due, held = own() if quiet else due, True
                elif polls is not None:  # the step in flight (async: step s; sync: s1)
                    due = yield from polls.tick(running, s, (), p_dt if lag else dt, real_counts, own)
                free_blocks = fq.size if fq is not None else kv.num_free_blocks
                shared = pool.shared_excess if pool is not None else kv.shared_excess
                comp = ctx - decoders if lag else ctx  # token states held when the record is taken
                if lin is not None:  # LinearBreakdown.split, inline (the hottest path: no call)
                    used = usable - free_blocks
                    internal = (used + shared) * B - comp
                    tok, res, ext, free = used * B - internal, 0, nulls, free_blocks * B
                else:
                    tok, res, internal, ext, free = breakdown(running, comp, waiting=head)
                if lag:  # step s lands (no frees), then step s1 is launched
                    log_row((k.step, p_start, p_dt, len(running), qnw, p_batch.prefill_tokens,
                             p_batch.num_decode_seqs, p_plan.num_preempted, free_blocks, tok, res,
                             internal, ext, free, shared, p_plan.swap_out_blocks, p_plan.swap_in_blocks))
                    k.busy_s += p_dt
                    p_plan, p_dt, p_start = NO_PLAN, dt, t
                    p_batch = new_batch((0, 0, 0.0, 0, decoders, ctx, pages, page, 0, 0, bb))
                else:  # step s1 is launched and lands
                    log_row((k.step, t, dt, len(running), qnw, 0, decoders, 0, free_blocks, tok, res,
                             internal, ext, free, shared, 0, 0))
                    k.busy_s += dt
                k.step += 1
                k.ff_steps += 1
                k.bulk_steps += 1
                s, t = s1, t + dt
                continue
        skip = held  # held still: the pass below admits nothing unless a pull comes first (then kept, below)
        # ---- plan step s1: arrivals, the running pass (decodes), admissions ----
        if not quiet:
            pull_due(plan_t)
        elif due <= plan_t:
            pull_due(plan_t)
            due, skip = own(), None
        n_part = 0 if part is None else next_chunk(sched, part, p_done, decoders, max_batched, len(bucket))
        if part is not None and not n_part:
            break  # the chunked prefill's step is not the window's to apply: go exact
        plan = None
        if out is not None:  # the running pass preempts: replayed on the crossing decoders (preempt.py)
            plan, c0_sum, decoders, pages = preempt_pass(k, running, bucket, out, s, fin, buckets, c0_sum, decoders, pages,
                                                         register if sync_reg else None)
        elif bucket or (sync_reg and buckets[(s1 + 1) % B]):
            pages += boundary(buckets, s1, lag, cross, register) if quick is None else quick.boundary(s1)
        if part is not None:  # its next chunk, after every decoder (running order)
            kv.allocate(part, n_part)
            plan = StepPlan(scheduled=[(part, n_part)])
            partial.discard(part.uid)
        nw = len(waiting)
        if nw and out is None and not skip and (seqs.note(max_seqs - 1 - len(running)) if seqs is not None else len(running) < max_seqs):
            adm = plan if plan is not None else StepPlan()
            sched.admit(adm, max_batched - decoders - n_part, plan_t, k.step + lag)
            if adm.scheduled:
                plan, nw = adm, len(waiting)
        keep = skip and out is None and max_batched > decoders and not (landing and p_done)  # no frees yet
        if lag and pausable and t >= na:  # async: step s (in flight) straddles the router's arrival
            na = yield from pause(k, running, s, uids(plan) | {r.uid for r in p_done}, t, na, router, real_counts)
            due = own() if quiet else due
        elif lag and polls is not None and landing:  # lockstep: sleep through step s (in flight)
            due = yield from polls.tick(running, s, uids(plan) | {r.uid for r in p_done}, p_dt, real_counts, own)
        if landing:  # async: step s lands at t, after step s1 was planned
            extra = k.computed_of(plan.scheduled) if plan is not None else 0
            land(k, lag, p_plan, p_batch, p_dt, p_start, p_done, c0_sum + decoders * s + extra, nw)
            due = own() if p_done and quiet else due  # a client's send at a finish (k.on_done)
        # ---- launch step s1 at t: batch, duration, tokens computed and sampled ----
        ctx = c0_sum + decoders * s1
        if plan is None or not plan.scheduled:  # decodes only: timed as a quiet step is (== step_cost, bit for bit)
            batch = new_batch((0, 0, 0.0, 0, decoders, ctx, pages, page, 0, 0, bb))
            if dec_n != decoders:
                dec_time, dec_n = k.decode_time(decoders), decoders
            dt = dec_time(ctx, pages)
        else:
            a = k.batch(plan)
            batch = new_batch((a.prefill_tokens, a.num_prefill_seqs, a.prefill_attn_pairs,
                               a.prefill_context_tokens, decoders + a.num_decode_seqs,
                               ctx + a.decode_context_tokens, pages + a.pages_touched,
                               page, 0, a.swap_in_blocks, bb))  # swap-in: CPU offload loads
            dt = step_cost(batch)
        end = t + dt
        if not lag and end >= na:  # sync: the router reads this step mid-flight
            if not pausable:  # the exact loop runs it
                hand_over(k, running, s, plan)
                return t, None
            na = yield from pause(k, running, s, uids(plan), end, na, router, real_counts)
            due = own() if quiet else due
        elif not lag and polls is not None:  # lockstep: sleep through step s1
            due = yield from polls.tick(running, s, uids(plan), dt, real_counts, own)
        if plan is not None:  # its requests advance; a completed prefill joins the decoders
            c0_in, n_in, pages_in, part = join_planned(plan, end, lag, s1, fin, ends, buckets, paged, partial)
            c0_sum, decoders, pages = c0_sum + c0_in, decoders + n_in, pages + pages_in
        s = s1
        done = fin.pop(s1, NONE)
        if done:  # sampled their last token: out of the decoders, real counts (in running order)
            done.sort(key=by_seq)
            gone_c0, gone_pages = dec.leave_all(done, buckets, s1, paged)  # (their real counts back)
            c0_sum, decoders, pages = c0_sum - gone_c0, decoders - len(done), pages - gone_pages
        p_plan, p_batch, p_dt, p_start, p_done, t, landing = plan if plan is not None else NO_PLAN, batch, dt, t, done, end, True
        if len(partial) > 1:
            break  # more than one chunked prefill remains: hand over to exact steps
        if not lag:  # sync: step s1 lands at its end, before step s1 + 1 is planned
            land(k, lag, p_plan, p_batch, p_dt, p_start, p_done,
                 c0_sum + decoders * s + (part.num_computed_tokens if part is not None else 0), nw)
            landing, keep = False, keep and not done
            due = own() if done and quiet else due  # (as above)
        held = True if keep else None
    if polls is not None:
        polls.handed_back(s)
    if not s:
        return t if f is None else f.start, f
    return close(k, lag, running, s, partial | {r.uid for r in p_done} if landing else partial,
                 landing, p_plan, p_batch, p_dt, p_start, p_done, t, due if quiet else -math.inf, na)
