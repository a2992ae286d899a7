"""The one difference between sync and async scheduling, as the fast-forward window sees it.

Every engine step has three phases: *plan* (the scheduler picks who runs: decodes take their
blocks, waiting requests are admitted), *launch* (the batch, its duration, the tokens it computes)
and *land* (its output reaches the scheduler: finished requests are freed, one record)::

    sync  (lag 0)   plan k   launch k   land k      plan k+1   launch k+1   land k+1 ...
    async (lag 1)   plan k+1 (while k runs)   land k   launch k+1   plan k+2   land k+1 ...

Under async scheduling (:mod:`sim.sched.async_scheduler`) step ``k + 1`` is planned from the
arrivals received when step ``k`` started and the outputs of steps up to ``k - 1``, so a plan sees
frees one step late, and a decoder's filled block is registered one step late (the token in
flight is unseen). :class:`Order` carries exactly those differences; the window
(:mod:`sim.engine.fastforward.window`) and the replica loop (:mod:`sim.engine.replica`) are written once
around it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.request import Request


@dataclass(frozen=True, slots=True)
class Order:
    """How the phases of consecutive steps interleave.

    Attributes:
        lag: steps between a step's launch and its output reaching the scheduler: 0 (sync, the
            step lands before the next is planned) or 1 (async: the next step is planned first,
            at the start time of the step in flight, with the step index ``k + 1``).
        name: ``sync`` or ``async``.
    """

    lag: int
    name: str

    def decoding(self, r: Request) -> bool:
        """``r`` may enter a window as a decoder: one token to compute, sampled before, and
        (async) its token in flight."""
        return (r.num_tokens - r.num_computed_tokens == 1 and r.num_output > 0
                and (not self.lag or r.pending_output > 0))


SYNC = Order(0, "sync")
ASYNC = Order(1, "async")


def order_of(async_scheduling: bool) -> Order:
    return ASYNC if async_scheduling else SYNC
