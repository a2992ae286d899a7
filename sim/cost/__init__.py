"""Step-cost models: how long one engine step takes.

The engine describes each step as a :class:`StepBatch` (a handful of integers) and asks a
:class:`StepCostModel` for its duration. Cost models are policies, one per file:

- ``batch.py``       the seam: ``StepBatch`` and the ``StepCostModel`` protocol (no sim imports)
- ``constant.py``    ``constant:SECONDS`` (tests, step-exact comparisons)
- ``roofline.py``    ``roofline``: analytic, **uncalibrated**
- ``calibrated.py``  ``calibrated``: fitted on GPU measurements (``calibration/``)

Build one with :func:`build_cost_model`. ``calibrated`` is imported only when asked for: it
reads YAML files and pulls in ``calibration/``, which a simulation with another model never
needs.
"""

from __future__ import annotations

from pathlib import Path

from sim.cost.batch import StepBatch, StepCostModel
from sim.cost.constant import ConstantCost
from sim.cost.roofline import RooflineCost, allreduce_time, swap_time
from sim.errors import ConfigError
from sim.specs import GpuSpec, ModelSpec

__all__ = ["ConstantCost", "RooflineCost", "StepBatch", "StepCostModel", "allreduce_time",
           "build_cost_model", "swap_time"]


def build_cost_model(
    spec: str, model: ModelSpec, gpu: GpuSpec, tp: int = 1, calibration: Path | None = None
) -> StepCostModel:
    """``constant:SECONDS`` | ``roofline`` | ``calibrated`` (needs calibration data)."""
    kind, _, arg = spec.partition(":")
    if kind == "constant":
        try:
            seconds = float(arg)
        except ValueError:
            raise ConfigError(f"--cost-model {spec!r}: expected constant:SECONDS, e.g. constant:0.01") from None
        if not seconds > 0:
            raise ConfigError(f"--cost-model {spec!r}: SECONDS must be > 0")
        return ConstantCost(seconds)
    if kind == "roofline":
        return RooflineCost(model, gpu, tp)
    if kind == "calibrated":
        try:
            from sim.cost.calibrated import load_calibrated_cost
        except ImportError:
            raise ConfigError("--cost-model calibrated: calibration support is not installed") from None
        return load_calibrated_cost(model, gpu, tp, calibration)
    raise ConfigError(f"--cost-model {spec!r}: expected constant:SECONDS, roofline or calibrated")
