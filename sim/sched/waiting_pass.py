"""The waiting pass of a scheduling step: admit waiting requests in queue order until one does
not fit (head-of-line), as vLLM 0.33's ``Scheduler.schedule`` does after the running pass.

For each candidate: the cheap no-hope check (:meth:`Admission.hopeless`), the prefix probe (the
allocator's hit continued by a KV connector, a :class:`~sim.kv.connector.PrefixHit`), the token
budget and the long-prefill threshold, then the admission rules (:mod:`sim.sched.admission`).
Fast-forward windows call it too, as the whole scheduling of a window step's admissions.

Compiled by Cython from this source where a C compiler is (``waiting_pass.pxd`` types its counts
and the pass's locals; ``setup.py``), else it runs as this Python. The queue, the admission rules,
the margins and the allocator stay the objects they are, called through their methods.
"""

from __future__ import annotations

from typing import Protocol

from sim.kv.base import KvAllocator
from sim.kv.margin import Margin
from sim.request import Request, Status
from sim.sched.admission import Admission
from sim.sched.plan import PrefixStats, StepPlan
from sim.sched.queues import WaitQueue
from sim.sched.transfers import REMOTE, Transfers, probe

RUNNING, PREEMPTED = Status.RUNNING, Status.PREEMPTED


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
    waiting = sched.waiting
    if budget <= 0 or not waiting:
        return  # (most steps of a busy replica: nothing else read)
    kv, running, adm = sched.kv, sched.running, sched.admission
    conn, B = kv.connector, kv.block_size
    skipped: list[Request] = []
    cap, seqs = sched.max_num_seqs - 1, sched.seq_margin
    while budget > 0:
        r = waiting.peek()
        if r is None:
            break
        if not (seqs.note(cap - len(running)) if seqs is not None else len(running) <= cap):
            break  # no running slot (checked only when a request waits: the margin's comparisons)
        if r.status is REMOTE and not sched.transfers.ready(r):
            skipped.append(waiting.pop())
            continue
        busy = len(running) > 0
        loaded = r.num_computed_tokens > 0  # back from an asynchronous load: counted already
        if adm.hopeless(kv, r, busy):
            break  # decided without probing the prefix cache
        if conn is None and not loaded:  # the allocator's hit alone (probe's plain case)
            hit, blocks = None, kv.get_computed_blocks(r)
            tokens, ext = len(blocks) * B, 0
        else:
            hit = probe(kv, conn, r)
            blocks, tokens, ext = hit.blocks, hit.tokens, hit.external_tokens
        n = long_prefill_cap(sched, r.num_tokens - tokens)
        if not sched.chunked_prefill and n > budget:
            break
        if n > budget:
            n = budget
        if not sched._may_start(r):
            break
        if hit is not None and hit.load_async:  # blocks for the hit and the load only; it waits, holding them
            if not adm.admit(kv, r, ext, blocks, busy, cache=False):
                break
            sched.transfers.allocated(r, hit)
            count_hit(sched, r, tokens)
            r.num_computed_tokens, r.status = tokens, REMOTE
            skipped.append(waiting.pop())
            continue
        if not (adm.admit_hopeful(kv, r, n, blocks, busy) if conn is None  # (nothing moved since
                else adm.admit(kv, r, n + ext, blocks, busy)):               # hopeless() above)
            break
        if conn is not None and hit is not None:
            sched.transfers.allocated(r, hit)
        waiting.pop()
        sched._started(r, n, plan, now, step)
        if ext:  # a synchronous load: a step-time term of this step (PCIe, as swap-in)
            plan.swap_in_blocks += ext // B
        if not loaded:
            count_hit(sched, r, tokens)
        r.status = RUNNING
        r.num_computed_tokens = tokens
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
    if head is None or budget <= 0:
        return True
    seqs, slack = sched.seq_margin, sched.max_num_seqs - 1 - len(sched.running)
    if not (seqs.note(slack) if seqs is not None else slack >= 0):
        return True
    return sched.admission.hopeless(sched.kv, head, True)


def count_hit(sched: Scheduler, r: Request, tokens: int) -> None:
    """Prefix-cache accounting, once per admission (vllm-v1-semantics.md s4.7): ``tokens`` hit."""
    st = sched.stats
    if r.status == PREEMPTED:
        st.preempted_queries += r.num_tokens
        st.preempted_hits += tokens
    else:
        st.queries += r.num_tokens
        st.hits += tokens
        r.prefix_hit_tokens = tokens
