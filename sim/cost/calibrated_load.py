"""The calibrated cost model from the committed public fits, or a user's harness fit first."""

from __future__ import annotations

from pathlib import Path

from sim.cost.calibrated import CalibratedCost, build_calibrated
from sim.cost.sources import committed_calibrations, read_calibration
from sim.cost.stack import DEFAULT_STACK, resolve_stack
from sim.errors import ConfigError
from sim.model.catalog import GpuSpec, ModelSpec


def load_calibrated_cost(model: ModelSpec, gpu: GpuSpec, tp: int, calibration: Path | None,
                         stack: str = DEFAULT_STACK, **options: bool) -> CalibratedCost:
    """Entry point used by ``sim.cost.build_cost_model("calibrated", ...)``.

    With ``calibration`` (a harness fit), its terms come first and the committed public fits
    fill in what it lacks (dense, all-reduce, elementwise for the GPUs Vidur profiled).
    """
    committed = committed_calibrations()
    if calibration is None:
        return build_calibrated(model, gpu, tp, committed, resolve_stack(stack), None, **options)
    p = Path(calibration)
    if p.is_dir():
        p = p / "fit.yaml"
    if not p.exists():
        raise ConfigError(f"--calibration {calibration}: no such file (expected a fit YAML or a "
                          "directory with fit.yaml)")
    own = read_calibration(p)
    return build_calibrated(model, gpu, tp, [own, *[s for s in committed if s.gpu != own.gpu]],
                            resolve_stack(stack), prefer=own, **options)
