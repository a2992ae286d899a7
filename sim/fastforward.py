"""Decode fast-forward: apply runs of steps in bulk, bit-identical to stepping one at a time.

In steady state most running requests are decoding: each step adds one token to each, and
the only per-request events are (a) crossing a block boundary (a new block every B steps),
(b) filling a block (its hash is registered), (c) finishing. Instead of touching every
request every step, decoders keep their token counts at a *virtual* start value ``c0`` (the
count they would have had at the start of the window) and are bucketed by ``c0 mod B``::

    step s of the window: a decoder needs a block   iff (c0 + s - 1) % B == 0
                          its last block fills      iff (c0 + s) % B == 0

so a step costs O(requests with an event), not O(batch). Admissions of waiting requests run
through the scheduler's own ``_admit`` on the real (eagerly updated) block pool, so they are
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

from typing import TYPE_CHECKING

from sim.cost import StepBatch
from sim.kv.paged import UNIQUE_BASE, PagedAllocator
from sim.kv.slab import SlabAllocator
from sim.request import Request, Status
from sim.sched.scheduler import StepPlan

if TYPE_CHECKING:
    from sim.engine import Replica


def fast_forward(rep: Replica, t: float) -> float:
    """Run as many steps as can be done in bulk, starting at time ``t``; return the end time."""
    sched = rep.sched
    if sched.swapped or not sched.chunked_prefill or sched.fork_cow:
        return t
    return _window(rep, t)


def _window(rep: Replica, t: float) -> float:
    """One window from materialised state; returns its end time."""
    sched, kv = rep.sched, rep.kv
    running = sched.running
    R = len(running)
    max_batched = sched.max_num_batched_tokens
    if R == 0 or max_batched < R:
        return t
    fin: dict[int, list[Request]] = {}  # window step -> requests whose last token it samples
    for r in running:
        if r.num_tokens - r.num_computed_tokens != 1 or not r.num_output:
            return t
    for r in running:
        left = r.output_tokens - r.num_output
        if left in fin:
            fin[left].append(r)
        else:
            fin[left] = [r]
    paged = isinstance(kv, PagedAllocator)
    B = kv.block_size if paged else 1
    caching = paged and kv.enable_caching  # type: ignore[union-attr]
    buckets: list[list[Request]] = [[] for _ in range(B)]
    c0_sum = 0
    pages = 0
    for r in running:
        c = r.num_computed_tokens
        c0_sum += c
        if paged:
            buckets[(1 - c) % B].append(r)
            pages += len(r.blocks)
    slab_sums = _slab_sums(running) if isinstance(kv, SlabAllocator) else None
    decoders = R                      # requests in the virtual representation
    step_cost, log, bb = rep.cost.step_time, rep.log, rep.block_bytes
    max_seqs = sched.max_num_seqs
    inbox = rep.inbox
    # replicas fed live by a router (fleet replay) carry the router's next-arrival hint
    routed = rep.next_arrival != rep._own_next_arrival
    log_row = log.rows.append
    null_slots = (kv.num_blocks - kv.usable_blocks) * B if paged else 0  # type: ignore[union-attr]
    usable = kv.usable_blocks if paged else 0  # type: ignore[union-attr]
    fq = kv.free_queue if paged else None  # type: ignore[union-attr]
    bh = kv.block_hash if paged else []  # type: ignore[union-attr]
    cache = kv.cache if paged else {}  # type: ignore[union-attr]
    s = 0
    while decoders:
        s1 = s + 1
        bucket = buckets[s1 % B] if paged else []
        if len(bucket) > kv.num_free_blocks or decoders > max_batched:
            break  # this step could preempt, or not every decoder fits the budget: go exact
        if routed and t >= rep.next_arrival():
            break  # a router may submit before this step starts: let SimPy run it first
        # ---- step s1: arrivals, the running pass (decodes), admissions ----
        if rep._cursor < len(inbox) and inbox[rep._cursor].arrival_s <= t:
            rep._pull(t)
        if bucket:
            new = kv.get_new_blocks(len(bucket))  # type: ignore[union-attr]
            for r, b in zip(bucket, new, strict=True):
                r.blocks.append(b)
            pages += len(bucket)
        if caching:
            for r in buckets[(s1 + 1) % B]:
                upto = r.num_computed_tokens + s1
                j = r.num_registered
                if r.content is None and upto // B == j + 1 and bh[r.blocks[j]] is None:
                    # == kv._register(r, upto) for one unique-content block, inlined
                    b = r.blocks[j]
                    key = -(r.uid * UNIQUE_BASE + 1) - j
                    bh[b] = key
                    if key in cache:
                        kv._dups.setdefault(key, []).append(b)  # type: ignore[union-attr]
                    else:
                        cache[key] = b
                    r.num_registered = j + 1
                else:
                    kv._register(r, upto)  # type: ignore[union-attr]
        plan = None
        nw = sched.num_waiting
        if nw and len(running) < max_seqs:
            plan = StepPlan()
            sched._admit(plan, max_batched - decoders, t, rep.step)
            if plan.scheduled:
                nw = sched.num_waiting
            else:
                plan = None
        ctx = c0_sum + decoders * s1
        if plan is None:
            batch = StepBatch(0, 0, 0.0, 0, decoders, ctx, pages, kv.block_size, 0, 0, bb)
        else:
            a = rep._batch(plan)
            batch = StepBatch(a.prefill_tokens, a.num_prefill_seqs, a.prefill_attn_pairs,
                              a.prefill_context_tokens, decoders + a.num_decode_seqs,
                              ctx + a.decode_context_tokens, pages + a.pages_touched,
                              kv.block_size, 0, 0, bb)
        dt = step_cost(batch)
        end = t + dt
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
                    c0 = r.num_computed_tokens
                    c0_sum += c0
                    decoders += 1
                    if paged:
                        buckets[(1 - c0) % B].append(r)
                        pages += len(r.blocks)
                    if s1 + left in fin:
                        fin[s1 + left].append(r)
                    else:
                        fin[s1 + left] = [r]
                    if slab_sums is not None:
                        slab_sums = _slab_add(slab_sums, r)
                else:
                    partial.add(r.uid)  # a chunked prefill remains: the next step is exact
        s = s1
        if partial:  # a chunked prefill remains: materialise, finish, hand over to exact steps
            _materialise(running, s, partial)
            rep._finish_bulk(end)
            log.row(rep.step, t, dt, len(running), sched.num_waiting, batch.prefill_tokens,
                    batch.num_decode_seqs, 0, kv.num_free_blocks, *rep._breakdown(),
                    kv.shared_excess, 0, 0)
            t = end
            rep.busy_s += dt
            rep.step += 1
            rep.ff_steps += 1
            return t
        done = fin.pop(s1, None)
        if done:
            # finish as Scheduler.update does: in running order, freeing each request's blocks
            done.sort(key=_seq)
            for r in done:
                c0 = r.num_computed_tokens
                c0_sum -= c0
                decoders -= 1
                if paged:
                    buckets[(1 - c0) % B].remove(r)
                    pages -= len(r.blocks)
                elif slab_sums is not None:
                    slab_sums = _slab_add(slab_sums, r, -1)
                r.num_computed_tokens += s1
                r.num_output += s1
                r.num_tokens += s1
                kv.free(r)
                r.status = Status.FINISHED
                r.finish_s, r.finish_step = end, rep.step
            running[:] = [r for r in running if r.status is not Status.FINISHED]
            rep.finished.extend(done)
        if paged:
            # == rep._paged_breakdown(comp), inlined for the hot path
            free = fq.size  # type: ignore[union-attr]
            excess = kv.shared_excess
            internal = (usable - free + excess) * B - (c0_sum + decoders * s)
            log_row((rep.step, t, dt, len(running), nw, batch.prefill_tokens,
                     batch.num_decode_seqs, 0, free, (usable - free) * B - internal, 0, internal,
                     null_slots, free * B, excess, 0, 0))
        else:
            bd = _slab_breakdown(kv, slab_sums, c0_sum + decoders * s)  # type: ignore[arg-type]
            log_row((rep.step, t, dt, len(running), sched.num_waiting, batch.prefill_tokens,
                     batch.num_decode_seqs, 0, 0, *bd, 0, 0, 0))
        t = end
        rep.busy_s += dt
        rep.step += 1
        rep.ff_steps += 1
    if s:
        _materialise(running, s, set())
    return t


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


def _slab_sums(running: list[Request]) -> tuple[int, int, int]:
    return (sum(r.final_tokens for r in running), sum(r.requested_slots for r in running),
            sum(r.chunk_size for r in running))


def _slab_add(sums: tuple[int, int, int], r: Request, sign: int = 1) -> tuple[int, int, int]:
    return (sums[0] + sign * r.final_tokens, sums[1] + sign * r.requested_slots,
            sums[2] + sign * r.chunk_size)


def _slab_breakdown(kv: SlabAllocator, sums: tuple[int, int, int], tok: int) -> tuple[int, int, int, int, int]:
    final, requested, chunk = sums
    largest = kv.placement.largest_free()
    holes = kv.placement.total_free() - largest
    return tok, final - tok, requested - final, chunk - requested + holes, largest
