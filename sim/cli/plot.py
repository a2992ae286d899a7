"""`kvsim plot KIND ...`: figures from run directories, sweep files, or a small replay."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from sim.cli import options as o
from sim.errors import ConfigError
from sim.plots import (
    block_table_view,
    blocksize_tradeoff,
    breakdown_bars,
    latency_cdfs,
    memory_map,
    memory_over_time,
    parse_slo,
    record_layout,
    save,
    sweep_heatmaps,
)
from sim.plots.common import RunInfo, common_info
from sim.plots.files import read_run, read_sweep
from sim.plots.heatmap import sweep_info
from sim.plots.labels import distinct_labels
from workloads import Trace, load_trace

app = typer.Typer(help="Figures (PNG + SVG): memory, breakdown, heatmap, cdf, memmap, blocksize.",
                  no_args_is_help=True, add_completion=False)
Out = Annotated[Path, typer.Option("--out", help="Directory for the PNG and SVG files.")]
Runs = Annotated[list[Path], typer.Argument(help="`kvsim simulate --out` directories.")]
TraceArg = Annotated[Path | None, typer.Argument(help="Trace file (default: the bundled Azure conv slice).")]


def _echo(paths: list[Path]) -> None:
    typer.echo("wrote " + ", ".join(str(p) for p in paths))


def _trace(path: Path | None, n: int | None) -> Trace:
    if path is None:
        from sim.cli.simulate import bundled_trace
        path = bundled_trace()
    tr = load_trace(path)
    return dataclasses.replace(tr, df=tr.df.head(n).reset_index(drop=True)) if n else tr


@app.command("memory", short_help="KV pool over time: categories, running/waiting, preemptions.")
def memory(run: Annotated[Path, typer.Argument(help="A `kvsim simulate --out` directory.")],
           out: Out = Path("plots")) -> None:
    """KV pool over time: stacked categories, running/waiting counts and preemptions."""
    info, steps, _, _ = read_run(run)
    _echo(save(memory_over_time(steps, info), out / "memory_over_time"))


@app.command("breakdown", short_help="Stacked bars of time-averaged KV categories (paper Fig. 2).")
def breakdown(runs: Annotated[list[Path] | None, typer.Argument(help="Run directories.")] = None,
              sweep: Annotated[Path | None, typer.Option("--sweep", help="A sweep.parquet instead of runs.")] = None,
              out: Out = Path("plots")) -> None:
    """Fig. 2-style stacked bars of time-averaged categories, one per run or sweep point."""
    if sweep is not None and runs:
        raise ConfigError("breakdown: give run directories or --sweep FILE, not both")
    if sweep is not None:
        df = read_sweep(sweep)
        df = df[df["status"] == "ok"]
        labels = sweep_labels(df)
        entries = [(lab, {c.removeprefix("mem_"): r[c] for c in df.columns if c.startswith("mem_")})
                   for lab, (_, r) in zip(labels, df.iterrows(), strict=True)]
        info = sweep_info(df)
    else:
        if not runs:
            raise ConfigError("breakdown: give run directories or --sweep FILE")
        loaded = [read_run(r) for r in runs]
        infos = _labelled(runs, [i for i, _, _, _ in loaded])
        entries = [(i.label, s["memory"]) for i, (_, _, _, s) in zip(infos, loaded, strict=True)]
        info = common_info(infos)
    _echo(save(breakdown_bars(entries, info), out / "breakdown"))


@app.command("heatmap", short_help="Heatmaps of sweep metrics over two keys, best cell under an SLO.")
def heatmap(sweep: Annotated[Path, typer.Argument(help="sweep.parquet")],
            x: Annotated[str, typer.Option("--x", help="Sweep key on the x axis.")] = "block_size",
            y: Annotated[str, typer.Option("--y", help="Sweep key on the y axis.")] = "gpu_memory_utilization",
            slo: Annotated[list[str] | None, typer.Option("--slo", help="e.g. ttft_p99_s<=0.5 (repeatable)")] = None,
            out: Out = Path("plots")) -> None:
    """Heatmaps of throughput, p99 TTFT/TPOT, preemptions per 1k, token-state share."""
    fig = sweep_heatmaps(read_sweep(sweep), x, y, slo=parse_slo(slo or []))
    _echo(save(fig, out / f"heatmap_{x}_x_{y}"))


@app.command("cdf", short_help="Latency CDFs (TTFT, TPOT, E2E) comparing runs.")
def cdf(runs: Runs, out: Out = Path("plots"),
        slo: Annotated[list[str] | None, typer.Option("--slo", help="Draw a target, e.g. ttft_p99_s<=0.5 (repeatable).")] = None,
        tail: Annotated[bool, typer.Option("--tail", help="Plot the tail (share slower than x, log scale): p99 readable.")] = False,
        ) -> None:
    """Latency CDFs (TTFT, TPOT, E2E) comparing runs."""
    loaded = [read_run(r) for r in runs]
    infos = _labelled(runs, [i for i, _, _, _ in loaded])
    fig = latency_cdfs([(i, req) for i, (_, _, req, _) in zip(infos, loaded, strict=True)],
                       slo=parse_slo(slo or []), tail=tail)
    _echo(save(fig, out / ("latency_tail" if tail else "latency_cdf")))


def _labelled(runs: list[Path], infos: list[RunInfo]) -> list[RunInfo]:
    """Infos whose legend labels differ (trace, then run name, added where needed)."""
    labels = distinct_labels([i.label for i in infos], [i.trace for i in infos], [r.name for r in runs],
                             [str(r) for r in runs])
    return [dataclasses.replace(i, label=lab) for i, lab in zip(infos, labels, strict=True)]


def sweep_labels(df: pd.DataFrame) -> list[str]:
    """One label per sweep row from the grid keys that vary (the trace by file name)."""
    keys = [c for c in df.columns[1:df.columns.get_loc("model")] if df[c].nunique() > 1]
    show = {"trace": lambda v: Path(str(v)).name}
    labels = [", ".join(f"{k}={show.get(k, str)(r[k])}" for k in keys) or str(r["key"]) for _, r in df.iterrows()]
    return labels if len(set(labels)) == len(labels) else [f"{lab} [{k}]" for lab, k in zip(labels, df["key"], strict=True)]


def _small_cfg(flags: dict[str, Any], config: Path | None, pool_slots: int | None) -> dict[str, Any]:
    base = o.build_config(config, **flags).model_dump(exclude_unset=True)
    if pool_slots:
        base.setdefault("max_model_len", pool_slots // 2)  # a small pool must hold a full request
    if pool_slots and "kv_memory" not in base and "num_gpu_blocks" not in base:
        from sim.memory.budget import budget_for
        bpt = budget_for(o.build_config(None, **base)).bytes_per_token
        base["kv_memory"] = f"{pool_slots * bpt / 1024:.0f}KiB"
    return base


@app.command("memmap", short_help="Physical blocks/slots over time, paged vs slab, block tables.")
def memmap(
    trace: TraceArg = None, out: Out = Path("plots"),
    requests: Annotated[int, typer.Option("--requests", min=1, help="Replay the first N requests.")] = 40,
    pool_slots: Annotated[int, typer.Option("--pool-slots", min=1, help="KV pool size in token slots (unless --kv-memory); max_model_len defaults to half of it.")] = 4096,
    at: Annotated[float | None, typer.Option("--at", min=0, help="Time (s) of the block-table view (default: busiest step).")] = None,
    request: Annotated[list[int] | None, typer.Option("--request", min=0, help="Request index to show (repeatable).")] = None,
    config: o.ConfigFile = None, model: o.Model = None, gpu: o.Gpu = None, block_size: o.BS = None,
    reservation: o.Res = None, cost_model: o.Cost = None, kv_memory: o.KVM = None,
    max_model_len: o.MML = None, enable_prefix_caching: o.EPC = None, preset: o.Preset = None,
) -> None:
    """Physical blocks/slots vs time, paged and slab side by side, plus block tables at one time."""
    flags = {k: v for k, v in locals().items() if k not in ("trace", "out", "requests", "pool_slots",
                                                             "at", "request", "config")}
    base = _small_cfg(flags, config, pool_slots)
    tr = _trace(trace, requests)
    for i in request or ():
        if i >= tr.num_requests:
            raise ConfigError(f"--request {i}: the replay has requests 0..{tr.num_requests - 1}")
    paged = record_layout(o.build_config(None, **{**base, "allocator": "paged"}), tr)
    slab = record_layout(o.build_config(None, **{**base, "allocator": "slab"}), tr)
    paths = save(memory_map([paged, slab]), out / "memory_map")
    if at is None:
        at = paged.times[max(range(len(paged.tables)), key=lambda i: len(paged.tables[i]))]
    paths += save(block_table_view(paged, at, request or ()), out / "block_tables_paged")
    paths += save(block_table_view(slab, at, request or ()), out / "block_tables_slab")
    _echo(paths)


@app.command("blocksize", short_help="Tail waste, block-table length and kernel time vs block_size.")
def blocksize(
    trace: TraceArg = None, out: Out = Path("plots"),
    block_sizes: Annotated[str, typer.Option("--block-sizes", help="Comma-separated block sizes to compare, tokens.")] = "1,2,4,8,16,32,64,128,256",
    requests: Annotated[int | None, typer.Option("--requests", min=1, help="Use the first N requests (default: all).")] = None,
    config: o.ConfigFile = None, model: o.Model = None, gpu: o.Gpu = None,
    cost_model: o.Cost = None, kv_memory: o.KVM = None, preset: o.Preset = None,
) -> None:
    """Tail waste, block-table length and modelled kernel time vs block_size."""
    flags = {k: v for k, v in locals().items() if k not in ("trace", "out", "block_sizes", "requests", "config")}
    cfg = o.build_config(config, **flags)
    try:
        sizes = [int(b) for b in block_sizes.split(",")]
    except ValueError:
        raise ConfigError(f"--block-sizes {block_sizes!r}: expected integers, e.g. 8,16,32") from None
    if any(b < 1 for b in sizes):
        raise ConfigError(f"--block-sizes {block_sizes!r}: every size must be >= 1")
    fig, tab = blocksize_tradeoff(cfg, _trace(trace, requests), sizes)
    out.mkdir(parents=True, exist_ok=True)
    tab.to_csv(out / "blocksize_tradeoff.csv", index=False)
    _echo([*save(fig, out / "blocksize_tradeoff"), out / "blocksize_tradeoff.csv"])


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="plot")
