"""The run's step-cost model for a config: the one place that reads the cost knobs of a
:class:`~sim.config.schema.SimConfig` (cost model, calibration, serving stack, eager mode,
async scheduling, expert parallelism, step-time scale). The builder, the cached static parts,
the summary's basis, the planner and the plots all call it."""

from __future__ import annotations

from pathlib import Path

from sim.config.schema import SimConfig
from sim.cost import CostBasis, StepCostModel, basis_of, build_cost_model
from sim.cost.scaled import ScaledCost
from sim.errors import KvsimError
from sim.model.catalog import GpuSpec, ModelSpec, resolve_gpu, resolve_model


def cost_key(cfg: SimConfig) -> tuple[object, ...]:
    """Every knob :func:`cost_model_for` reads (besides the model spec): equal keys, equal models."""
    return (cfg.cost_model, cfg.gpu, cfg.tensor_parallel_size, cfg.calibration, cfg.serving_stack,
            cfg.enforce_eager, bool(cfg.resolved("async_scheduling")), cfg.enable_expert_parallel,
            cfg.step_time_scale)


def cost_model_for(cfg: SimConfig, model: ModelSpec | None = None, gpu: GpuSpec | None = None) -> StepCostModel:
    """``cfg``'s step-cost model. ``model`` is the spec the run uses (KV dtype applied; default:
    the catalog entry of ``cfg.model``), ``gpu`` defaults to ``cfg.gpu``'s."""
    model = model if model is not None else resolve_model(cfg.model)
    gpu = gpu if gpu is not None else resolve_gpu(cfg.gpu)
    cost = build_cost_model(cfg.cost_model, model, gpu, cfg.tensor_parallel_size,
                            Path(cfg.calibration) if cfg.calibration else None, cfg.serving_stack,
                            enforce_eager=cfg.enforce_eager,
                            async_scheduling=bool(cfg.resolved("async_scheduling")),
                            expert_parallel=cfg.enable_expert_parallel)
    return ScaledCost(cost, cfg.step_time_scale) if cfg.step_time_scale != 1.0 else cost


def cost_basis_for(cfg: SimConfig) -> CostBasis:
    """Fitted / extrapolated / uncalibrated for ``cfg`` without a run (the planner's band);
    ``unknown`` when the model cannot be built for it."""
    try:
        return basis_of(cost_model_for(cfg))
    except KvsimError:
        return CostBasis("unknown")
