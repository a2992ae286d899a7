"""``--cost-model constant:SECONDS``: every step takes the same time.

For tests and step-exact comparisons: with a constant step, step k of a busy engine starts at
exactly k x SECONDS, so timings can be checked by hand and queueing theory applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost.batch import CostBasis, StepBatch
from sim.cost.bulk import DecodeTerms


@dataclass(frozen=True, slots=True)
class ConstantCost:
    """Every step takes exactly ``seconds``: step k of a busy engine starts at k x seconds."""

    seconds: float

    @property
    def name(self) -> str:
        return f"constant:{self.seconds:g}"

    @property
    def basis(self) -> CostBasis:
        return CostBasis("exact", f"every step takes {self.seconds:g} s by construction")

    def step_time(self, batch: StepBatch) -> float:
        return self.seconds

    def decode_terms(self, seqs: int, block_size: int) -> DecodeTerms:
        """Bulk decode times (sim/cost/bulk.py): ``seconds + 0.0 * (...)`` is ``seconds``."""
        return DecodeTerms(self.seconds, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, True)
