"""The paper's vLLM V0 scheduler (vllm-v1-semantics.md s9) as a subclass of the V1 one.

Differences from V1:

* **prefill-only steps**: a step that admits prompts runs prompts only, each whole (no
  chunked prefill); otherwise it runs the decodes;
* **sequence groups** (``fork_cow``): parallel samples / beams of one prompt are admitted
  together, forked from the leader's block table (:mod:`sim.kv.sharing`), and copy a shared
  last block before writing into it; beam groups re-fork every step, seeded by ``rng``.

Only the ``paper-v0`` preset (and fork + copy-on-write sharing) runs this step shape; the V1
presets without chunked prefill keep V1's mixed steps (:class:`~sim.sched.scheduler.Scheduler`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.kv.base import Sharing
from sim.request import Request, Status
from sim.sched.plan import StepPlan
from sim.sched.scheduler import Scheduler


class PaperV0Scheduler(Scheduler):
    chunked_prefill = False
    mixed_steps = False

    def __init__(self, *args: Any, fork_cow: bool = False,
                 rng: np.random.Generator | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        if fork_cow and self.kv.sharing is None:
            raise ValueError("fork + copy-on-write needs an allocator that shares tables (--allocator paged)")
        self.fork_cow = fork_cow
        self.seq_margin = None  # its prompt-only admission tests the cap its own way: not recorded
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def add(self, req: Request) -> None:
        if self.fork_cow and req.group is not None and req.group[0] is not req:
            return  # forked from the group leader at admission (gang scheduling)
        super().add(req)

    # ---- one step: prompts, or else decodes -------------------------------------------------
    def schedule(self, now: float, step: int) -> StepPlan:
        self.transfers.poll(now)
        plan = StepPlan()
        if not self.preemption.swapped and self.waiting.peek() is not None \
                and len(self.running) < self.max_num_seqs:
            self.admit(plan, self.max_num_batched_tokens, now, step)
            if plan.scheduled:
                return plan
        running = self.running
        i = 0
        while i < len(running):
            r = running[i]
            n = r.num_tokens - r.num_computed_tokens
            ok = True
            while not self._grow(r, n):
                victim = running.pop(self.choose_victim(running))
                self._preempt(victim, plan)
                if victim is r:
                    ok = False
                    break
            if not ok:
                continue
            plan.scheduled.append((r, n))
            i += 1
        if plan.num_preempted == 0 and self.preemption.swapped:
            self.preemption.resume(self, plan, self.max_num_batched_tokens - len(plan.scheduled))
        return plan

    def _grow(self, r: Request, n: int) -> bool:
        """Copy a shared, partially filled last block before writing into it (fork mode)."""
        kv = self.kv
        if self.fork_cow and r.num_computed_tokens % kv.block_size:
            sharing = self._sharing()
            if sharing.last_block_shared(r) and not sharing.copy_on_write(r):
                return False
        return kv.allocate(r, n)

    def _sharing(self) -> Sharing:
        s = self.kv.sharing
        assert s is not None  # checked at construction (fork_cow)
        return s

    # ---- sequence groups ----------------------------------------------------------------------
    def _followers(self, r: Request) -> list[Request]:
        """Group members admitted (forked) with a leader that has never run."""
        if not self.fork_cow or r.group is None or r.group[0] is not r or r.num_preemptions:
            return []
        return [m for m in r.group[1:] if m.status == Status.WAITING]

    def _may_start(self, r: Request) -> bool:
        followers = self._followers(r)
        return not followers or len(self.running) + 1 + len(followers) <= self.max_num_seqs

    def _started(self, r: Request, n: int, plan: StepPlan, now: float, step: int) -> None:
        """The group shares the leader's prompt blocks by reference."""
        for f in self._followers(r):
            self._sharing().fork(r, f)
            f.status = Status.RUNNING
            f.first_scheduled_s, f.first_scheduled_step = now, step
            f.prefix_hit_tokens = 0
            self.run(f)
            plan.scheduled.append((f, n))
            plan.free_riders.add(f.uid)

    def update(self, plan: StepPlan, end: float, step: int) -> list[Request]:
        done = super().update(plan, end, step)
        if self.fork_cow:
            self._beam_reforks(plan)
        return done

    def _beam_reforks(self, plan: StepPlan) -> None:
        """After a beam step each beam continues from a randomly chosen live beam (seeded rng).

        A beam whose continuation comes from another parent drops its own table and forks the
        parent's (every block's ref count +1); its next write copy-on-writes the shared tail.
        """
        sharing = self._sharing()
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
            snap = {id(m): sharing.blocks(m) for m in live}
            moves = [(m, list(snap[id(live[p])])) for m, p in zip(live, parents, strict=True)
                     if live[p] is not m]
            if moves:
                sharing.retable(moves)
