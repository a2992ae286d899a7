"""What a router reads of a replica (:mod:`sim.cluster.policies`): its queue and its
outstanding tokens, and two flags that answer the common reads without counting.

A router reads every replica at every arrival. Most replicas are idle or napping through a run
then, so the flags are kept by the loop (:class:`~sim.engine.replica.Replica`):

* ``idle``: the loop waits for a submission with nothing submitted, waiting or running:
  :attr:`RouterSignals.outstanding_tokens` is 0;
* ``surely_busy``: the loop naps through a lazy run whose outstanding tokens stay >= 1 until
  it wakes (they only fall as it decodes, or rise with a submission, and it computed them at
  the nap's end): a router comparing it with a replica at 0 needs no count.
"""

from __future__ import annotations

import simpy

from sim.engine.step import StepKernel
from sim.request import Request


class RouterSignals:
    """The reads, on a replica's loop state (its inbox, cursor, cache and kernel)."""

    env: simpy.Environment
    kernel: StepKernel
    idle: bool
    surely_busy: bool
    _inbox: list[Request]
    _cursor: int
    _ot: int | None
    _lazy: bool

    @property
    def unpulled(self) -> list[Request]:
        """Submitted requests the loop has not taken in yet (router signals: queue depth)."""
        return self._inbox[self._cursor:]

    @property
    def outstanding_tokens(self) -> int:
        """Tokens still to process for submitted, waiting and running requests (router signal)."""
        k = self.kernel
        tot = self._ot
        if tot is None:  # once since the loop last ran (sim/engine/resumes.py)
            tot, s = 0, k.sched
            if self._cursor < len(self._inbox):
                tot += sum(r.final_tokens for r in self._inbox[self._cursor:])
            for r in s.running:  # (the router reads every replica at every arrival: plain loops)
                tot += r.final_tokens - r.num_computed_tokens
            if s.waiting:
                for r in s.waiting:
                    tot += r.final_tokens - r.num_computed_tokens
            if self._lazy:  # (only the loop and submit change a lazily read replica's requests)
                self._ot = tot
        return tot - (k.virtual_tokens if k.virtual_at is None else k.virtual_at(self.env.now))
