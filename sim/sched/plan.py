"""What one scheduling pass decided (consumed by the step kernel), and prefix-cache counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.request import Request


@dataclass(slots=True)
class StepPlan:
    scheduled: list[tuple[Request, int]] = field(default_factory=list)  # (request, new tokens)
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
