"""A candidate replica shape: GPU, tensor parallelism and engine knobs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from sim.config.schema import SimConfig, make_config

# engine knobs the planner may search (SimConfig field names = vLLM engine-arg names)
KNOBS = ("gpu_memory_utilization", "block_size", "max_num_seqs", "max_num_batched_tokens",
         "allocator", "preemption")


@dataclass(frozen=True, slots=True)
class Candidate:
    gpu: str
    tp: int
    knobs: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        k = ",".join(f"{n}={v}" for n, v in self.knobs)
        return f"{self.gpu} tp{self.tp}" + (f" [{k}]" if k else "")

    @property
    def knob_text(self) -> str:
        return " ".join(f"{n}={v}" for n, v in self.knobs) or "defaults"

    def config(self, base: dict[str, Any]) -> SimConfig:
        """The SimConfig of one replica: ``base`` settings plus this candidate's."""
        kw = dict(base, gpu=self.gpu, tensor_parallel_size=self.tp, **dict(self.knobs))
        return make_config("flags", **kw)


def grid(gpus: list[str], tps: list[int], knobs: dict[str, list[Any]]) -> list[Candidate]:
    """Cartesian product of GPUs x TP degrees x knob values (knobs with one value included)."""
    names = [k for k in KNOBS if knobs.get(k)]
    combos = list(itertools.product(*(knobs[k] for k in names))) or [()]
    return [Candidate(g, tp, tuple(zip(names, combo, strict=True)))
            for g in gpus for tp in tps for combo in combos]
