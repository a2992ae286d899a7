"""Step-cost models: how long one engine step takes.

The engine describes each step as a :class:`StepBatch` (a handful of integers) and asks a
:class:`StepCostModel` for its duration. Cost models are policies, one per file:

- ``batch.py``       the seam: ``StepBatch``, the ``StepCostModel`` protocol and ``CostBasis``
                     (fitted / extrapolated / uncalibrated, with the error band); no sim imports
- ``constant.py``    ``constant:SECONDS`` (tests, step-exact comparisons)
- ``roofline.py``    ``roofline``: analytic, **uncalibrated**
- ``calibrated.py``  ``calibrated`` (the default): operator fits (``sources.py``) plus a serving
                     stack profile (``stack.py``), fitted on public measurements (``calibration/``)
- ``predict.py``     one step's time for a described batch (``kvsim cost predict``)

Build one with :func:`build_cost_model`. ``calibrated`` is imported only when asked for: it
reads YAML files and pulls in ``calibration/``, which a simulation with another model never
needs.
"""

from __future__ import annotations

from pathlib import Path

from sim.cost.batch import CostBasis, StepBatch, StepCostModel, basis_of
from sim.cost.constant import ConstantCost
from sim.cost.roofline import RooflineCost, allreduce_time, swap_time
from sim.errors import ConfigError
from sim.model.catalog import GpuSpec, ModelSpec

__all__ = ["ConstantCost", "CostBasis", "RooflineCost", "StepBatch", "StepCostModel", "allreduce_time",
           "basis_of", "build_cost_model", "swap_time"]

DEFAULT_COST_MODEL = "calibrated"


def build_cost_model(
    spec: str, model: ModelSpec, gpu: GpuSpec, tp: int = 1, calibration: Path | None = None,
    serving_stack: str | None = None, *, enforce_eager: bool = False, async_scheduling: bool = True,
    expert_parallel: bool = False,
) -> StepCostModel:
    """``constant:SECONDS`` | ``roofline`` | ``calibrated``. ``serving_stack`` (None: the default,
    ``vllm-v1``) and the engine options apply to ``calibrated`` only: ``enforce_eager`` brings
    back a CUDA-graph stack's launch floor, ``async_scheduling`` hides the scheduler's CPU time
    behind the GPU, ``expert_parallel`` lays a MoE's experts out whole over the TP GPUs."""
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
            from sim.cost.calibrated_load import load_calibrated_cost
        except ImportError:
            raise ConfigError("--cost-model calibrated: calibration support is not installed") from None
        return load_calibrated_cost(model, gpu, tp, calibration, serving_stack or "vllm-v1",
                                    enforce_eager=enforce_eager, async_scheduling=async_scheduling,
                                    expert_parallel=expert_parallel)
    raise ConfigError(f"--cost-model {spec!r}: expected constant:SECONDS, roofline or calibrated")
