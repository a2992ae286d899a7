"""``step_time_scale``: every step of another cost model, multiplied by a factor.

``kvsim plan`` sizes fleets at the pessimistic edge of the step-time error band with it
(factor = 1 + band); it also answers what-ifs such as "steps 20 % slower than predicted".
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost.batch import CostBasis, StepBatch, StepCostModel, basis_of


@dataclass(frozen=True, slots=True)
class ScaledCost:
    inner: StepCostModel
    factor: float

    @property
    def name(self) -> str:
        return f"{self.inner.name} x {self.factor:g}"

    @property
    def basis(self) -> CostBasis:
        b = basis_of(self.inner)
        return CostBasis(b.basis, f"{b.detail}; every step x {self.factor:g}", b.band)

    def step_time(self, batch: StepBatch) -> float:
        return self.inner.step_time(batch) * self.factor
