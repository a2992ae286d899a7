"""Victim choice as plain functions (Ciw style): given the running list, whom to preempt.

Queue ordering lives in :mod:`sim.sched.queues`; what a victim loses in :mod:`sim.sched.preemption`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.request import Request

VictimPolicy = Callable[[Sequence[Request]], int]
"""Given the running list, return the index of the request to preempt."""


def victim_last(running: Sequence[Request]) -> int:
    """vLLM FCFS: the most recently admitted/resumed request (end of the running list)."""
    return len(running) - 1


def victim_lowest_priority(running: Sequence[Request]) -> int:
    """vLLM PRIORITY: ``max(running, key=(priority, arrival_time))``; a larger priority value is
    less important, and of equal priorities the latest arrival goes first.

    vLLM's ``arrival_time`` is the wall clock when the engine received the request, so two
    requests never tie: of requests with the same trace arrival (common in Mooncake traces),
    the one submitted later has the larger time and is preempted first. Submission order is
    ``uid`` order, so ties on ``(priority, arrival_s)`` go to the larger ``uid`` -- the newest,
    not the first one in the running list (which ``max`` alone would pick).
    """
    best = 0
    b = running[0]
    for i, r in enumerate(running):
        if (r.priority, r.arrival_s, r.uid) > (b.priority, b.arrival_s, b.uid):
            best, b = i, r
    return best


def victim_fewest_tokens(running: Sequence[Request]) -> int:
    """Alternative: preempt the request with the least computed KV (cheapest to recompute)."""
    return min(range(len(running)), key=lambda i: (running[i].num_computed_tokens, -i))


VICTIMS: dict[str, VictimPolicy] = {
    "last": victim_last,
    "priority": victim_lowest_priority,
    "fewest-tokens": victim_fewest_tokens,
}
