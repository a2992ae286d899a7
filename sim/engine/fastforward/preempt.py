"""A step that preempts, inside a fast-forward window (vLLM's FCFS recompute).

A window used to end before any step whose decoders crossing a block boundary need more blocks
than are free, and the exact loop ran that step: a pass over every running request, then a new
window joining them all again. On the 70B replica nearly every window (2,814 of 2,952) ended so.
The step's running pass (``Scheduler.schedule``) only touches the pool for the decoders that
cross a boundary; the others take their token in place. So the window replays that pass on
the crossing decoders alone, in running order, with the scheduler's own calls::

    running   d1 d2 d3 d4 d5 d6 d7 d8          x: crosses a boundary this step (the bucket)
    bucket       x     x        x  x           free blocks: 1
              d2 takes the last free block; d4 fails -> victim d8 (the end of running) is
              preempted, its blocks freed; d4 retries and takes one; d7 takes one more, or
              fails -> victim d7 (now the end): itself, and the pass stops there

Each allocation is ``Scheduler._grow`` on the decoder's real counts (the margin notes, the pops
and the registrations of the exact pass), each preemption ``Scheduler._preempt`` on the
victim's real counts. No admission follows in that step (vLLM admits only when nothing was
preempted). Sync, the blocks that the survivors' tokens fill in that step are registered after
the pass, as the window registers them at any step (marks or unique keys: their order against
the pass's pops and frees changes nothing). :func:`victims` first works out, without changing anything, whom the pass would
preempt; the window applies the step only when every victim is a decoder of the window (not a
request whose last token is in flight) and someone is left to run. Otherwise, and outside the
configuration this covers (``victim_last``, recompute, a paged pool outside fork mode, no KV
connector), the window ends before the step as before.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.engine.fastforward.decoders import leave, shift
from sim.engine.step import StepKernel
from sim.request import Request
from sim.sched.plan import StepPlan
from sim.sched.policies import victim_last


def supported(k: StepKernel, linear: bool) -> bool:
    """Whether this window's steps that preempt can be applied in it (module docstring);
    ``linear``: a paged pool whose breakdown is linear (not a slab, not fork mode, where blocks
    are shared partly: :meth:`~sim.kv.base.DecodeBlocks.linear_breakdown`)."""
    sched, kv = k.sched, k.kv
    return (linear and sched.choose_victim is victim_last
            and sched.preemption.name == "recompute" and kv.connector is None and not sched.lookahead
            and not kv.allocates_every_step)


def victims(running: list[Request], bucket: list[Request], in_flight_last: list[Request], free: int,
            ref: list[int], decoders: int) -> list[Request] | None:
    """Whom the running pass preempts, in order, when ``bucket`` (running order) needs a block
    each and ``free`` are free; None when the window cannot apply the step (a victim whose last
    token is in flight, or nobody left to run). Changes nothing."""
    out: list[Request] = []
    gone: set[int] = set()
    dropped: dict[int, int] = {}  # references the victims so far drop, per block
    end = len(running)
    for r in bucket:
        if id(r) in gone:
            continue
        while free < 1:
            if not end:
                return None
            end -= 1
            v = running[end]
            if v in in_flight_last:
                return None
            out.append(v)
            gone.add(id(v))
            blocks = v.kv.blocks
            if list(map(ref.__getitem__, blocks)).count(1) == len(blocks):  # it alone holds each: all go
                free += len(blocks)  # back (and no other victim holds one: none is in ``dropped``)
            else:
                for b in blocks:  # the blocks whose last reference it holds go back to the queue
                    n = dropped.get(b, 0)
                    if ref[b] - n == 1:
                        free += 1
                    dropped[b] = n + 1
            if v is r:
                break
        if id(r) not in gone:
            free -= 1
    return out if len(out) < decoders else None


def preempt_pass(k: StepKernel, running: list[Request], bucket: list[Request], out: list[Request], s: int,
                 fin: dict[int, list[Request]], buckets: list[list[Request]], c0_sum: int, decoders: int,
                 pages: int, fill: Callable[[list[Request], int], None] | None) -> tuple[StepPlan, int, int, int]:
    """Apply the running pass :func:`victims` worked out, at window step ``s + 1``. Returns its
    plan (the preemptions; nothing scheduled beyond the decoders' tokens) and the window's new
    sums of the decoders' virtual start counts, their number and their pages. ``fill`` (sync):
    registers the blocks the survivors fill in this step.

    A victim's token in flight reaches it when step ``s`` lands, after this plan: seen, not
    cached (``AsyncScheduler.output`` skips a preempted request). Its mark is cleared here;
    nothing reads it in between (a router's read takes running requests only)."""
    sched = k.sched
    plan = StepPlan()
    taken = 0
    for r in list(bucket):  # (victims leave the bucket)
        if r not in bucket:
            continue
        shift([r], s)  # real counts for the scheduler's calls
        while not sched._grow(r, 1):
            victim = running.pop()  # victim_last
            if victim is not out[taken]:
                raise AssertionError("the running pass preempted another request than worked out")
            taken += 1
            if victim is r:
                shift([r], -s)
            pages -= leave(victim, buckets, True)
            key = victim.output_tokens - victim.num_output  # the window step that samples its last token
            fin[key].remove(victim)
            if not fin[key]:
                del fin[key]
            c0_sum -= victim.num_computed_tokens
            decoders -= 1
            shift([victim], s)
            victim.pending_output = 0
            sched._preempt(victim, plan)
            if victim is r:
                break
        else:
            shift([r], -s)
            pages += 1
    if taken != len(out):
        raise AssertionError("the running pass preempted fewer requests than worked out")
    filling = buckets[(s + 2) % len(buckets)]
    if fill is not None and filling:
        fill(filling, s + 1)
    return plan, c0_sum, decoders, pages
