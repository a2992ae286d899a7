"""The waiting pass of a scheduling step: admit waiting requests in queue order until one does
not fit (head-of-line), as vLLM 0.33's ``Scheduler.schedule`` does after the running pass.

For each candidate: the cheap no-hope check (:meth:`Admission.hopeless`), the prefix probe (the
allocator's hit continued by a KV connector, a :class:`~sim.kv.connector.PrefixHit`), the token
budget and the long-prefill threshold, then the admission rules (:mod:`sim.sched.admission`).
Fast-forward windows call it too, as the whole scheduling of a window step's admissions.

Its plain case (no KV connector, FCFS, the full-ISL reserve, an allocator that says its
arithmetic is plain -- ``KvAllocator``'s ``plain_admission`` --, a candidate without prompt content) is compiled where the extension was built (``_admit.c``: the same
decisions in the same order, the allocator's methods called as here); it hands the rest of a
pass back to this loop at the first candidate it does not handle.
"""

from __future__ import annotations

from typing import Protocol

from sim.compiled import compiled
from sim.kv.base import KvAllocator
from sim.kv.connector import PrefixHit
from sim.kv.margin import Margin
from sim.request import Request, Status
from sim.sched.admission import Admission
from sim.sched.plan import PrefixStats, StepPlan
from sim.sched.queues import FcfsQueue, WaitQueue
from sim.sched.transfers import REMOTE, Transfers, probe

_C = compiled("sim.sched._admit")
if _C is not None:  # the exact types it handles (a subclass may change what it relies on)
    _C.setup(FcfsQueue, Admission, Margin, Status.RUNNING, Status.PREEMPTED, REMOTE)
PLAIN = _C.admit if _C is not None else None  # (sched, plan, budget, now, step) -> None | budget left
NOTHING = _C.nothing if _C is not None else None  # admits_nothing's plain case: -> bool | None (not plain)


class Scheduler(Protocol):
    """What the waiting pass uses of the scheduler that runs it."""

    kv: KvAllocator
    running: list[Request]
    waiting: WaitQueue
    admission: Admission
    transfers: Transfers
    stats: PrefixStats
    max_num_seqs: int
    seq_margin: Margin | None
    threshold: int
    chunked_prefill: bool
    plain_hooks: bool  # run, _may_start, _started and finish are the base class's (the compiled passes need it)

    @property
    def num_waiting(self) -> int: ...

    def run(self, req: Request) -> None: ...
    def _may_start(self, r: Request) -> bool: ...
    def _started(self, r: Request, n: int, plan: StepPlan, now: float, step: int) -> None: ...


def admit(sched: Scheduler, plan: StepPlan, budget: int, now: float, step: int) -> None:
    """Admit waiting requests in queue order until one does not fit (head-of-line).

    A request waiting for an asynchronous KV load is passed over until it has arrived
    (:mod:`sim.sched.transfers`); the ones passed over keep their places in the queue.
    """
    if PLAIN is not None:
        left = PLAIN(sched, plan, budget, now, step)
        if left is None:
            return
        budget = left  # the compiled pass handed back a candidate it does not handle
    kv, running, adm, waiting = sched.kv, sched.running, sched.admission, sched.waiting
    xfer = sched.transfers
    conn = kv.connector
    skipped: list[Request] = []
    cap, seqs = sched.max_num_seqs - 1, sched.seq_margin
    while budget > 0:
        r = waiting.peek()
        if r is None:
            break
        if not (seqs.note(cap - len(running)) if seqs is not None else len(running) <= cap):
            break  # no running slot (checked only when a request waits: the margin's comparisons)
        if r.status is REMOTE and not xfer.ready(r):
            skipped.append(waiting.pop())
            continue
        loaded = r.num_computed_tokens > 0  # back from an asynchronous load: counted already
        if adm.hopeless(kv, r, bool(running)):
            break  # decided without probing the prefix cache
        hit = probe(kv, conn, r)
        n = long_prefill_cap(sched, r.num_tokens - hit.tokens)
        if not sched.chunked_prefill and n > budget:
            break
        n = min(n, budget)
        if not sched._may_start(r):
            break
        ext = hit.external_tokens
        if hit.load_async:  # blocks for the hit and the load only; it waits, holding them
            if not adm.admit(kv, r, ext, hit.blocks, bool(running), cache=False):
                break
            xfer.allocated(r, hit)
            count_hit(sched, r, hit)
            r.num_computed_tokens, r.status = hit.tokens, REMOTE
            skipped.append(waiting.pop())
            continue
        if not (adm.admit_hopeful(kv, r, n, hit.blocks, bool(running)) if conn is None  # (nothing moved since
                else adm.admit(kv, r, n + ext, hit.blocks, bool(running))):               # hopeless() above)
            break
        if conn is not None:
            xfer.allocated(r, hit)
        waiting.pop()
        sched._started(r, n, plan, now, step)
        if ext:  # a synchronous load: a step-time term of this step (PCIe, as swap-in)
            plan.swap_in_blocks += ext // kv.block_size
        if not loaded:
            count_hit(sched, r, hit)
        r.status = Status.RUNNING
        r.num_computed_tokens = hit.tokens
        if r.first_scheduled_step < 0:
            r.first_scheduled_s, r.first_scheduled_step = now, step
        sched.run(r)
        plan.scheduled.append((r, n))
        budget -= n
    for r in reversed(skipped):
        waiting.prepend(r)


def long_prefill_cap(sched: Scheduler, n: int) -> int:
    """vLLM's ``long_prefill_token_threshold``: at most that many of ``n`` tokens a step, when
    more than one request is in the system (the running pass and the waiting pass alike)."""
    thr = sched.threshold
    if 0 < thr < n and (len(sched.running) + sched.num_waiting) > 1:
        return thr
    return n


def admits_nothing(sched: Scheduler, head: Request | None, budget: int) -> bool:
    """True when :func:`admit` would admit nothing now, nor on later steps while the head stays
    the same and the free blocks do not grow: its guards (a waiting head, a running slot, token
    budget) and its head-of-line :meth:`Admission.hopeless` test, which depends only on the head
    and the free blocks (fast-forward's quiet steps then skip the pass)."""
    if NOTHING is not None:
        said = NOTHING(sched, head, budget)
        if said is not None:
            return said
    if head is None or budget <= 0:
        return True
    seqs, slack = sched.seq_margin, sched.max_num_seqs - 1 - len(sched.running)
    if not (seqs.note(slack) if seqs is not None else slack >= 0):
        return True
    return sched.admission.hopeless(sched.kv, head, True)


def count_hit(sched: Scheduler, r: Request, hit: PrefixHit) -> None:
    """Prefix-cache accounting, once per admission (vllm-v1-semantics.md s4.7)."""
    st = sched.stats
    if r.status == Status.PREEMPTED:
        st.preempted_queries += r.num_tokens
        st.preempted_hits += hit.tokens
    else:
        st.queries += r.num_tokens
        st.hits += hit.tokens
        r.prefix_hit_tokens = hit.tokens
