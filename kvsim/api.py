"""Python forms of ``kvsim sweep``, ``kvsim plan`` and ``kvsim simulate --cluster``.

Each is a thin wrapper over what the command calls, and returns the typed result the command
writes: :class:`~sim.sweep.driver.SweepRun` (``.table`` is ``sweep.parquet``),
:class:`~sim.fleet.planner.Plan` (``.table`` is ``plan.csv``),
:class:`~sim.cluster.disagg.ClusterResult` (``.requests`` / ``.steps`` are the parquet files).
The config is given as on the command line: a :class:`~sim.config.schema.SimConfig`
(``config=``), a pasted ``vllm serve`` line (``vllm_args=``) and keyword keys, each winning over
the one before; an unknown key is a one-line ConfigError naming the nearest valid one.

    import kvsim
    run = kvsim.sweep({"max_num_seqs": [64, 128]}, "trace.csv", out="sweeps/a", model="llama-3.1-8b")
    plan = kvsim.plan("trace.csv", slo={"ttft_p99": 1.0}, vllm_args="vllm serve meta-llama/Llama-3.1-8B-Instruct")
    res = kvsim.simulate_cluster({"instances": [{"name": "r", "count": 2}]}, "trace.csv")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.config.schema import SimConfig, make_config

if TYPE_CHECKING:
    from sim.cluster.disagg import ClusterResult
    from sim.cluster.slo import Slo
    from sim.fleet.planner import Plan
    from sim.sweep.driver import SweepRun
    from workloads.schema import Trace

def config_keys(config: SimConfig | None = None, vllm_args: str | None = None, **keys: Any) -> dict[str, Any]:
    """The config keys of ``config``, then a ``vllm serve`` line, then ``keys`` (validated once,
    so a typo'd key fails here with a did-you-mean)."""
    out = config.model_dump(exclude_unset=True) if config is not None else {}
    if vllm_args is not None:
        from sim.config.vllm_args import parse_vllm_serve

        out |= parse_vllm_serve(vllm_args).config
    out |= {k: v for k, v in keys.items() if v is not None}
    if vllm_args is not None and out.get("model") is None:
        make_config(vllm_args=vllm_args)   # the line's own refusal: no model (kvsim will not guess one)
    make_config("kvsim", **out)
    return out


def _trace(trace: Any) -> Trace:
    from workloads.loader import load_trace

    if trace is None:
        from sim.cli.simulate import bundled_trace

        return load_trace(bundled_trace())
    return load_trace(trace) if isinstance(trace, str | Path) else trace


def sweep(grid: Mapping[str, Sequence[Any]], trace: str | Path | None = None, out: str | Path = "sweeps/latest", *,
          config: SimConfig | None = None, vllm_args: str | None = None, jobs: int = 1, backend: str = "local",
          retry_failed: bool = False, **keys: Any) -> SweepRun:
    """``kvsim sweep TRACE --set K=v1,v2 ... --out OUT``: every point of ``grid`` over the
    config; rows appended to ``OUT/sweep.parquet`` (a rerun skips points already there)."""
    from sim.cli.notices import check_block_sizes
    from sim.errors import ConfigError
    from sim.sweep import expand, run_sweep

    spec = {k: list(v) for k, v in grid.items()}
    if not spec:
        raise ConfigError("sweep: give the grid, e.g. {'max_num_seqs': [64, 128]}")
    if trace is None and "trace" not in spec:
        from sim.cli.simulate import bundled_trace

        trace = bundled_trace()
    base = config_keys(config, vllm_args, **keys)
    check_block_sizes(spec.get("block_size", [base.get("block_size", 16)]))
    points = expand(spec, base, trace)
    return run_sweep(points, Path(out), backend=backend, jobs=jobs, retry_failed=retry_failed)


def _slo(slo: Mapping[str, float], attainment: float | None) -> Slo:
    """``{"ttft_p99": 1.0}`` -> :class:`Slo`; a key that is not METRIC_QUANTILE is a one-line error."""
    from sim.cli.plan import build_slo
    from sim.cluster.slo import QUANTILES
    from sim.errors import ConfigError

    valid = [f"{m}_{q}" for m in ("ttft", "tpot", "e2e") for q in QUANTILES]
    for k in slo:
        if k not in valid:
            raise ConfigError(f"plan(slo=...): unknown target {k!r} (valid: {', '.join(valid)})")
    if not slo:
        raise ConfigError(f"plan(slo=...): give at least one target ({', '.join(valid)}) in seconds")
    return build_slo(dict(slo), attainment)


def plan(trace: Any = None, *, slo: Mapping[str, float], gpus: Sequence[str] = ("h100",),
         tps: Sequence[int] | None = None,
         attainment: float | None = None, knobs: Mapping[str, Sequence[Any]] | None = None,
         disagg: str | None = None, routers: Sequence[str] = ("least-outstanding-tokens",), link: str = "rdma-ndr",
         rate_scale: float = 1.0, target_qps: float | None = None, seeds: int = 3, window: int = 2000,
         search_iters: int = 3, headroom: float = 0.0, validate: bool = True, band: bool = True, workers: int = 1,
         config: SimConfig | None = None, vllm_args: str | None = None, **keys: Any) -> Plan:
    """``kvsim plan TRACE --slo-...``: the cheapest fleet meeting ``slo`` (``{"ttft_p99": 1.0,
    "tpot_p90": 0.05}``: metric_quantile -> seconds). ``knobs``: values to search per engine knob;
    ``disagg``: the ``--disagg`` text (every shape then gets the same batch-limit search,
    :mod:`sim.fleet.tuning`). Nothing is written; ``plan.table`` is what ``plan.csv`` holds."""
    from sim.fleet.planner import PlanSpec, run_plan
    from sim.fleet.prices import load_prices
    from sim.fleet.tuning import tuned_knobs, with_base_knobs
    from sim.fleet.xpyd_plan import parse_splits

    base = config_keys(config, vllm_args, **keys)
    base.setdefault("model", "llama-3.1-8b")
    base.pop("gpu", None)
    tp_set = int(base.pop("tensor_parallel_size", 1))   # a line's -tp: the TP searched unless tps is given
    gpu_list = [g.lower() for g in gpus]
    tp_list = [int(t) for t in tps] if tps else [tp_set]
    grid = {k: list(v) for k, v in (knobs or {}).items()}
    splits = parse_splits(disagg, list(routers), link) if disagg else []
    if splits:
        grid = tuned_knobs(base, grid, gpu_list[0])
    spec = PlanSpec(gpus=gpu_list, tps=tp_list, slo=_slo(slo, attainment), base=base,
                    prices=load_prices(None), knobs=with_base_knobs(base, grid), rate_scale=rate_scale,
                    target_qps=target_qps, router=routers[0], headroom=headroom, replications=seeds,
                    window=window, iters=search_iters, validate=validate, workers=workers, splits=splits)
    return run_plan(_trace(trace).df, spec, band=band)


def simulate_cluster(cluster: Mapping[str, Any] | str | Path, trace: Any = None, *, config: SimConfig | None = None,
                     vllm_args: str | None = None, **keys: Any) -> ClusterResult:
    """``kvsim simulate TRACE --cluster FILE``: ``cluster`` a cluster file or its mapping (the
    schema: ``kvsim simulate --cluster-help``); the config keys apply to every instance, under
    each instance's own ``config``."""
    from sim.cluster.disagg import run_cluster
    from sim.cluster.spec import load_cluster, parse_cluster

    base = config_keys(config, vllm_args, **keys)
    spec = (load_cluster(Path(cluster), base) if isinstance(cluster, str | Path)
            else parse_cluster(dict(cluster), "cluster", base))
    return run_cluster(spec, _trace(trace))
