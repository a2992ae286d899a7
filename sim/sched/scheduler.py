"""The vLLM V1 scheduler (vllm-v1-semantics.md s5-6), over any allocator.

One call to :meth:`Scheduler.schedule` builds one engine step; :meth:`Scheduler.update`
applies its outcome. Everything that is a choice is passed in:

    Scheduler(kv, queue=FcfsQueue(),            # waiting order        sim/sched/queues.py
              admission=Admission(...),         # may a request start  sim/sched/admission.py
              preemption=Recompute(),           # what a victim loses  sim/sched/preemption.py
              choose_victim=victim_last)        # who is preempted     sim/sched/policies.py

The paper's V0 behaviour (prefill-only steps, fork + copy-on-write, beam re-forks) is the
subclass in :mod:`sim.sched.paper_v0`; vLLM's async scheduling (step k+1 planned while step k
runs) the subclass in :mod:`sim.sched.async_scheduler`; speculative decoding is a :class:`SpecDecode`
passed in (:mod:`sim.sched.spec_decode`).
"""

from __future__ import annotations

from sim.kv.base import KvAllocator
from sim.kv.margin import Margin
from sim.request import Request, Status
from sim.sched.admission import Admission
from sim.sched.plan import PrefixStats, StepPlan
from sim.sched.policies import VictimPolicy, victim_last
from sim.sched.preemption import Recompute
from sim.sched.queues import FcfsQueue, WaitQueue
from sim.sched.spec_decode import SpecDecode
from sim.sched.transfers import Transfers
from sim.sched.waiting_pass import admit, admits_nothing, long_prefill_cap


class Scheduler:
    """vLLM V1: running requests first (decodes, chunked prefills), then new admissions.

    Without chunked prefill (``chunked_prefill=False``) a step still mixes decodes and prompts,
    as vLLM V1 does; a prompt that does not fit the rest of the token budget waits (whole
    prompts only). The paper's prefill-only steps are :class:`~sim.sched.paper_v0.PaperV0Scheduler`.
    """

    chunked_prefill = True
    mixed_steps = True                 # decodes and prompts share a step (paper-v0: prompts only)
    async_scheduling = False           # sim/sched/async_scheduler.py

    def __init__(
        self,
        kv: KvAllocator,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        queue: WaitQueue | None = None,
        admission: Admission | None = None,
        preemption: Recompute | None = None,
        choose_victim: VictimPolicy = victim_last,
        long_prefill_token_threshold: int = 0,
        chunked_prefill: bool | None = None,
        spec: SpecDecode | None = None,
        max_model_len: int = 1 << 62,
    ) -> None:
        if chunked_prefill is not None:
            self.chunked_prefill = chunked_prefill
        self.spec = spec
        self.spec_tokens = spec.num_speculative_tokens if spec is not None else 0
        self.lookahead = spec.lookahead if spec is not None else 0
        self.max_model_len = max_model_len
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        #: slack of every "len(running) < max_num_seqs" admission test (sim/kv/margin.py)
        self.seq_margin: Margin | None = Margin()
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: WaitQueue = queue if queue is not None else FcfsQueue()
        self.admission = admission if admission is not None else Admission()
        self.preemption = preemption if preemption is not None else Recompute()
        self.choose_victim = choose_victim
        self.threshold = long_prefill_token_threshold
        self.running: list[Request] = []
        self._seq = 0
        self.stats = PrefixStats()
        self.num_preemptions = 0
        self.transfers = Transfers(kv)     # a KV connector's requests between steps

    # ---- queues -------------------------------------------------------------------------------
    @property
    def swapped(self) -> int:
        """Requests waiting in CPU swap space."""
        return len(self.preemption.swapped)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.preemption.swapped)

    def waiting_requests(self) -> list[Request]:
        return [*self.waiting, *self.preemption.swapped]

    def add(self, req: Request) -> None:
        self.waiting.add(req)

    def run(self, req: Request) -> None:
        """Append to the running list; ``seq`` orders requests as the list does."""
        req.seq = self._seq
        self._seq += 1
        self.running.append(req)

    def reject_head(self, reason: str) -> Request:
        """Take the head of the waiting queue out for good (it can never be scheduled)."""
        if self.transfers.pending:  # an engine that rejects instead of waiting would leak its blocks
            raise RuntimeError("nothing to schedule while KV loads are pending: wait until "
                               "KvConnector.next_finished_s(), do not reject the queue head")
        r = self.waiting.pop()
        r.status, r.reject_reason = Status.REJECTED, reason
        return r

    # ---- one step -----------------------------------------------------------------------------
    def schedule(self, now: float, step: int) -> StepPlan:
        if self.kv.connector is not None:
            self.transfers.poll(now)
        plan = StepPlan()
        budget = self.max_num_batched_tokens
        running, kv = self.running, self.kv
        scheduled = plan.scheduled
        # Fast path: a decode whose token lands inside its last block (c % B != 0) needs no new
        # block and cannot fail; only a block it fills must be registered in the prefix cache.
        # A slab's chunk always has room.
        # Sliding-window KV groups (sim/kv/coordinator.py) may release a block on any step: no fast path.
        B = kv.block_size if kv.paged else 0
        register = kv.register_full_blocks if B and kv.enable_caching else None
        # Speculative decoding: a decode carries its draft tokens (no fast path, see _grow).
        fast = not kv.allocates_every_step and not self.spec_tokens
        spec = self.spec_tokens
        lag = self.async_scheduling
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            c = r.num_computed_tokens
            n = r.num_tokens - c
            if n == 1:
                if lag and r.num_output >= r.output_tokens:
                    i += 1  # async: its last token is in flight; vLLM schedules no extra step
                    continue
                if fast and (not B or c % B):
                    if register is not None and (c + 1) % B == 0 and not r.pending_output:
                        register(r, c + 1)  # (a token in flight registers one step later)
                    scheduled.append((r, 1))
                    budget -= 1
                    i += 1
                    continue
                if spec and r.num_output:
                    n += spec  # vLLM num_tokens_with_spec: the drafts proposed after its last step
            n = self.chunk_tokens(n, budget)
            if spec:
                n = min(n, self.max_model_len - 1 - c)  # no position past max_model_len
            if n <= 0:
                i += 1
                continue
            ok = True
            while not self._grow(r, n):
                v = self.choose_victim(running)
                victim = running.pop(v)
                if v < i:
                    i -= 1
                    for k, (q, m) in enumerate(scheduled):
                        if q is victim:
                            budget += m
                            del scheduled[k]
                            break
                self._preempt(victim, plan)
                if victim is r:
                    ok = False
                    break
            if not ok:
                if self.waiting.scan_past_self_preemption:
                    continue
                break
            scheduled.append((r, n))
            budget -= n
            i += 1
        if plan.num_preempted == 0:
            if self.preemption.swapped:
                budget = self.preemption.resume(self, plan, budget)
            if not self.preemption.swapped:
                self.admit(plan, budget, now, step)
        return plan

    def chunk_tokens(self, n: int, budget: int) -> int:
        """Tokens the running pass gives a request with ``n`` still to compute and ``budget``
        left: vLLM's ``long_prefill_token_threshold`` (when more than one request is in the
        system), then the budget (fast-forward continues a chunked prefill with it)."""
        n = long_prefill_cap(self, n)
        return n if n < budget else budget

    def _grow(self, r: Request, n: int) -> bool:
        """Room for ``n`` more tokens of a running request (no admission rules apply), plus the
        speculative drafter's lookahead slots (vLLM ``allocate_slots(num_lookahead_tokens=)``,
        capped at ``max_model_len``).

        The allocator registers full blocks up to ``min(computed + new, num_tokens)``; vLLM's bound
        is ``min(computed + n, tokens the scheduler has seen)``. Lookahead slots are not tokens, and
        under async scheduling a token in flight is not seen yet (``pending_output``), so for those
        two cases the request shows the allocator its seen count during the call.
        """
        la, pend = self.lookahead, r.pending_output
        if not la and not pend:
            return self.kv.allocate(r, n)
        c, full = r.num_computed_tokens, r.num_tokens
        take = min(n + la, self.max_model_len - c)
        seen = min(full - pend, c + n)
        if seen == min(c + take, full):
            return self.kv.allocate(r, take)
        r.num_tokens = seen
        try:
            return self.kv.allocate(r, take)
        finally:
            r.num_tokens = full

    #: admit waiting requests in queue order until one does not fit (head-of-line); a plain
    #: function bound as the method, so the call costs no extra frame (:mod:`sim.sched.waiting_pass`)
    admit = admit
    #: the waiting pass can admit nothing while its head and the free blocks stay as they are
    admits_nothing = admits_nothing

    def kv_holders(self) -> list[Request]:
        """Every request holding KV blocks (for ``kv.check``): the running ones, plus any a KV
        connector holds between steps (waiting for a load, being sent)."""
        t = self.transfers
        return self.running if t.connector is None else t.holders(self.running, self.waiting)

    # hooks for the paper-v0 subclass (sequence groups)
    def _may_start(self, r: Request) -> bool:
        return True

    def _started(self, r: Request, n: int, plan: StepPlan, now: float, step: int) -> None:
        return None

    # ---- preemption ---------------------------------------------------------------------------
    def _preempt(self, victim: Request, plan: StepPlan) -> None:
        victim.num_preemptions += 1
        self.num_preemptions += 1
        plan.num_preempted += 1
        self.preemption.preempt(self, victim, plan)

    # ---- outcome ------------------------------------------------------------------------------
    def update(self, plan: StepPlan, end: float, step: int) -> list[Request]:
        """Advance computed tokens and sample; returns the requests whose last token was sampled
        (still in ``running``: the step kernel finishes them)."""
        if self.spec is not None:
            return self.spec.update(plan, end)
        done = []
        for r, n in plan.scheduled:
            if r.advance(n, end) and r.num_output >= r.output_tokens:
                done.append(r)
        return done

    def output(self, plan: StepPlan) -> None:
        """The step's sampled tokens reach the scheduler: nothing to do here (they were seen at
        :meth:`update`; async scheduling sees them one step later)."""
        return None

    def finish(self, done: list[Request], end: float, step: int) -> None:
        """Take finished requests out of ``running`` (order kept) and free them, in ``done`` order.

        Under async scheduling a request may have been preempted while its last token was in
        flight; it finishes all the same (vLLM: ``stopped_preempted_reqs``), out of the queue.
        """
        if not done:
            return
        finished_kv = self.kv.free if self.kv.connector is None else self.transfers.finished
        running, gone = self.running, 0  # gone: finished requests in running (status RUNNING until now)
        for r in done:
            if r.status is not Status.RUNNING:
                self.preemption.forget(self, r)
            else:
                gone += 1
            finished_kv(r)
            r.status = Status.FINISHED
            r.finish_s, r.finish_step = end, step
        finished = Status.FINISHED
        if gone == 1 and len(done) == 1 and _removed(running, done[0]):
            return  # the common case: one request leaves (found by identity, in C)
        running[:] = [r for r in running if r.status is not finished]  # in place: callers hold it


def _removed(running: list[Request], r: Request) -> bool:
    """Take ``r`` out of ``running`` (the first occurrence: it holds each request once)."""
    try:
        running.remove(r)  # Request compares by identity (eq=False)
    except ValueError:
        return False
    return True
