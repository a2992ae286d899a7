"""The vLLM V1 scheduler (vllm-v1-semantics.md s5-6), over any allocator.

One call to :meth:`Scheduler.schedule` builds one engine step; :meth:`Scheduler.update`
applies its outcome. Policies (victim choice, ordering) are passed in; the allocator is
mechanism (``allocate_slots`` returns False when blocks are not there).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from sim.kv.paged import PagedAllocator, cdiv
from sim.kv.slab import SlabAllocator
from sim.request import Request, Status
from sim.sched.policies import VictimPolicy, victim_last


@dataclass(slots=True)
class StepPlan:
    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    free_riders: set[int] = field(default_factory=set)  # forked members: no compute of their own
    num_preempted: int = 0
    swap_out_blocks: int = 0
    swap_in_blocks: int = 0


@dataclass(slots=True)
class PrefixStats:
    queries: int = 0
    hits: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0


class Scheduler:
    """vLLM V1: running first, then waiting; recompute (default) or swap preemption."""

    def __init__(
        self,
        kv: PagedAllocator | SlabAllocator,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        policy: str = "fcfs",
        choose_victim: VictimPolicy = victim_last,
        reserve_full_isl: bool = True,
        chunked_prefill: bool = True,
        long_prefill_token_threshold: int = 0,
        preemption: str = "recompute",
        cpu_swap_blocks: int = 0,
        fork_cow: bool = False,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.priority = policy == "priority"
        self.choose_victim = choose_victim
        self.reserve_full_isl = reserve_full_isl
        self.chunked_prefill = chunked_prefill
        self.threshold = long_prefill_token_threshold
        self.swap = preemption == "swap" and isinstance(kv, PagedAllocator)
        self.cpu_swap_blocks = cpu_swap_blocks
        self.cpu_used_blocks = 0
        self.waiting: deque[Request] = deque()
        self._heap: list[tuple[int, float, int, Request]] = []
        self.running: list[Request] = []
        self._seq = 0
        self.swapped: deque[Request] = deque()
        self.fork_cow = fork_cow          # paper-v0 sharing: groups forked, copy-on-write
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.cow_copies = 0
        self.stats = PrefixStats()
        self.num_preemptions = 0
        self.swap_fallbacks = 0

    # ---- queues ---------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self._heap) + len(self.waiting) + len(self.swapped)

    def add(self, req: Request) -> None:
        if self.fork_cow and req.group is not None and req.group[0] is not req:
            return  # forked from the group leader at admission (gang scheduling)
        if self.priority:
            heapq.heappush(self._heap, (req.priority, req.arrival_s, req.uid, req))
        else:
            self.waiting.append(req)

    def _peek(self) -> Request | None:
        if self.priority:
            return self._heap[0][3] if self._heap else None
        return self.waiting[0] if self.waiting else None

    def _pop(self) -> None:
        if self.priority:
            heapq.heappop(self._heap)
        else:
            self.waiting.popleft()

    def _run(self, req: Request) -> None:
        """Append to the running list; ``seq`` orders requests as the list does."""
        req.seq = self._seq
        self._seq += 1
        self.running.append(req)

    def _prepend(self, req: Request) -> None:
        if self.priority:
            self.add(req)
        else:
            self.waiting.appendleft(req)

    # ---- one step ---------------------------------------------------------------------------
    def schedule(self, now: float, step: int) -> StepPlan:
        if not self.chunked_prefill:
            return self._schedule_prefill_first(now, step)
        plan = StepPlan()
        budget = self.max_num_batched_tokens
        running, kv = self.running, self.kv
        scheduled = plan.scheduled
        thr = self.threshold
        # Fast path: a decode whose token lands inside its last block needs no new block and
        # cannot fail; only a block it fills must be registered in the prefix cache.
        B = kv.block_size if isinstance(kv, PagedAllocator) else 0
        register = kv._register if B and kv.enable_caching else None  # type: ignore[union-attr]
        slab = B == 0
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            c = r.num_computed_tokens
            n = r.num_tokens - c
            if n == 1 and (slab or (c % B and not (self.fork_cow and kv.ref[r.blocks[-1]] > 1))):  # type: ignore[union-attr]
                if register is not None and (c + 1) % B == 0:
                    register(r, c + 1)
                scheduled.append((r, 1))
                budget -= 1
                i += 1
                continue
            if 0 < thr < n and (len(running) + self.num_waiting) > 1:
                n = thr
            n = min(n, budget)
            if n <= 0:
                i += 1
                continue
            ok = True
            while not self._alloc(r, n):
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
                if self.priority:
                    continue
                break
            scheduled.append((r, n))
            budget -= n
            i += 1
        if plan.num_preempted == 0:
            if self.swapped:
                budget = self._swap_in(plan, budget)
            if not self.swapped:
                self._admit(plan, budget, now, step)
        return plan

    def _hopeless(self, r: Request, has_running: bool) -> bool:
        """True if the full-ISL admission check must fail whatever the prefix probe finds.

        A request with no shareable content can only hit its own blocks from before a
        preemption; those sit in the free queue (ref 0) and count against capacity, so its
        need is exactly cdiv(num_tokens, B). Same decision as probing, much cheaper when a
        blocked head is retried every step.
        """
        kv = self.kv
        if not (self.reserve_full_isl and isinstance(kv, PagedAllocator)) or r.content is not None:
            return False
        wm = kv.watermark_blocks if has_running else 0
        return cdiv(r.num_tokens, kv.block_size) + wm > kv.free_queue.size

    def _alloc(self, r: Request, n: int) -> bool:
        """allocate_slots, preceded in fork mode by copy-on-write of a shared partial last block."""
        kv = self.kv
        if self.fork_cow and r.blocks and r.num_computed_tokens % kv.block_size:
            assert isinstance(kv, PagedAllocator)
            if kv.ref[r.blocks[-1]] > 1:
                if not kv.copy_on_write(r):
                    return False
                self.cow_copies += 1
        return kv.allocate_slots(r, n)

    def _admit(self, plan: StepPlan, budget: int, now: float, step: int) -> None:
        kv, running = self.kv, self.running
        while budget > 0 and len(running) < self.max_num_seqs:
            r = self._peek()
            if r is None:
                break
            if self._hopeless(r, bool(running)):
                break  # head-of-line blocking, decided without probing the prefix cache
            hits = kv.get_computed_blocks(r) if r.num_computed_tokens == 0 else []
            hit_tokens = len(hits) * kv.block_size
            n = r.num_tokens - hit_tokens
            if 0 < self.threshold < n and (len(running) + self.num_waiting) > 1:
                n = self.threshold
            if not self.chunked_prefill and n > budget:
                break
            n = min(n, budget)
            followers = self._followers(r)
            if followers and len(running) + 1 + len(followers) > self.max_num_seqs:
                break
            if not kv.allocate_slots(r, n, hits, full_sequence_must_fit=self.reserve_full_isl,
                                     apply_watermark=bool(running)):
                break  # head-of-line blocking
            self._pop()
            for f in followers:  # the group shares the leader's prompt blocks by reference
                assert isinstance(kv, PagedAllocator)
                kv.fork(r, f)
                f.status = Status.RUNNING
                f.first_scheduled_s, f.first_scheduled_step = now, step
                f.prefix_hit_tokens = 0
                self._run(f)
                plan.scheduled.append((f, n))
                plan.free_riders.add(f.uid)
            resumed = r.status == Status.PREEMPTED
            r.status = Status.RUNNING
            r.num_computed_tokens = hit_tokens
            if resumed:
                self.stats.preempted_queries += r.num_tokens
                self.stats.preempted_hits += hit_tokens
            else:
                self.stats.queries += r.num_tokens
                self.stats.hits += hit_tokens
                r.prefix_hit_tokens = hit_tokens
            if r.first_scheduled_step < 0:
                r.first_scheduled_s, r.first_scheduled_step = now, step
            self._run(r)
            plan.scheduled.append((r, n))
            budget -= n

    def _followers(self, r: Request) -> list[Request]:
        """Group members admitted (forked) with a leader that has never run (paper-v0)."""
        if not self.fork_cow or r.group is None or r.group[0] is not r or r.num_preemptions:
            return []
        return [m for m in r.group[1:] if m.status == Status.WAITING]

    def _schedule_prefill_first(self, now: float, step: int) -> StepPlan:
        """Non-chunked (paper-v0 style): a step that admits prompts runs prompts only."""
        plan = StepPlan()
        if not self.swapped and self._peek() is not None and len(self.running) < self.max_num_seqs:
            self._admit(plan, self.max_num_batched_tokens, now, step)
            if plan.scheduled:
                return plan
        running = self.running
        i = 0
        while i < len(running):
            r = running[i]
            n = r.num_tokens - r.num_computed_tokens
            ok = True
            while not self._alloc(r, n):
                victim = running.pop(self.choose_victim(running))
                self._preempt(victim, plan)
                if victim is r:
                    ok = False
                    break
            if not ok:
                continue
            plan.scheduled.append((r, n))
            i += 1
        if plan.num_preempted == 0 and self.swapped:
            self._swap_in(plan, self.max_num_batched_tokens - len(plan.scheduled))
        return plan

    # ---- preemption ---------------------------------------------------------------------------
    def _preempt(self, victim: Request, plan: StepPlan) -> None:
        kv = self.kv
        nblocks = len(victim.blocks)
        victim.num_preemptions += 1
        self.num_preemptions += 1
        plan.num_preempted += 1
        if self.swap:
            if self.cpu_used_blocks + nblocks <= self.cpu_swap_blocks:
                kv.free(victim)
                self.cpu_used_blocks += nblocks
                plan.swap_out_blocks += nblocks
                victim.status = Status.SWAPPED
                self.swapped.append(victim)
                return
            self.swap_fallbacks += 1  # CPU swap space full: recompute instead (counted)
        kv.free(victim)
        victim.status = Status.PREEMPTED
        victim.num_computed_tokens = 0
        self._prepend(victim)

    def _swap_in(self, plan: StepPlan, budget: int) -> int:
        kv = self.kv
        assert isinstance(kv, PagedAllocator)
        while self.swapped and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.swapped[0]
            need = cdiv(r.num_computed_tokens, kv.block_size)
            n = r.num_tokens - r.num_computed_tokens
            extra = cdiv(r.num_computed_tokens + n, kv.block_size) - need
            if need + extra + kv.watermark_blocks > kv.num_free_blocks:
                break
            self.swapped.popleft()
            r.blocks = kv.get_new_blocks(need)
            self.cpu_used_blocks -= need
            plan.swap_in_blocks += need
            r.status = Status.RUNNING
            kv.allocate_slots(r, n)
            self._run(r)
            plan.scheduled.append((r, n))
            budget -= n
        return budget

    # ---- outcome ------------------------------------------------------------------------------
    def update(self, plan: StepPlan, end: float, step: int) -> list[Request]:
        """Advance computed tokens, sample tokens, finish and free. Returns finished requests."""
        finished = []
        for r, n in plan.scheduled:
            if r.advance(n, end) and r.num_output >= r.output_tokens:
                finished.append(r)
        if self.fork_cow:
            self._beam_reforks(plan)
        if finished:
            done = set(map(id, finished))
            self.running = [r for r in self.running if id(r) not in done]
            for r in finished:
                self.kv.free(r)
                r.status = Status.FINISHED
                r.finish_s, r.finish_step = end, step
        return finished

    def _beam_reforks(self, plan: StepPlan) -> None:
        """After a beam step each beam continues from a randomly chosen live beam (seeded rng).

        A beam whose continuation comes from another parent drops its own table and forks the
        parent's (every block's ref count +1); its next write copy-on-writes the shared tail.
        """
        kv = self.kv
        assert isinstance(kv, PagedAllocator)
        seen: set[int] = set()
        for r, _ in plan.scheduled:
            g = r.group
            if g is None or not r.beam or id(g) in seen:
                continue
            seen.add(id(g))
            live = [m for m in g if m.status == Status.RUNNING and m.num_output < m.output_tokens
                    and m.num_computed_tokens == m.num_tokens - 1]
            if len(live) < 2 or len({m.num_computed_tokens for m in live}) != 1:
                continue
            parents = self.rng.integers(0, len(live), size=len(live))
            snap = {id(m): list(m.blocks) for m in live}
            moves = [(m, list(snap[id(live[p])])) for m, p in zip(live, parents, strict=True)
                     if live[p] is not m]
            if moves:
                kv.retable(moves)
