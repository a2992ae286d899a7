"""`kvsim sweep TRACE --set KEY=v1,v2 ... --out DIR`: a resumable grid of simulations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from sim.cli import options as o
from sim.cli.notices import check_block_sizes
from sim.cli.progress import Stages
from sim.config.schema import SimConfig
from sim.config.vllm_bench import VllmBench
from sim.errors import ConfigError
from sim.sweep import CLIENTS_KEY, expand, load_grid_yaml, parse_sets, run_sweep
from workloads.load import Load

Sets = Annotated[list[str] | None, typer.Option(
    "--set", help="KEY=v1,v2,... (repeatable). Any simulate option, or trace=PATH,...")]
Grid = Annotated[Path | None, typer.Option("--grid", help="YAML mapping KEY: [values] (scalars are fixed).")]
Backend = Annotated[str, typer.Option("--backend", help="local (process pool) | ray")]
Address = Annotated[str | None, typer.Option(
    "--address", help="Ray cluster address, e.g. 10.0.0.1:6379 (default: RAY_ADDRESS or a local Ray)")]
Jobs = Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Parallel workers (default: CPU count).")]
Retries = Annotated[int, typer.Option("--max-retries", min=0, help="Retries of a point whose worker died.")]
RetryFailed = Annotated[bool, typer.Option("--retry-failed", help="Rerun points recorded as failed.")]


def register(app: typer.Typer) -> None:
    @app.command()
    @o.simulate_flags
    def sweep(
        trace: Annotated[Path | None, typer.Argument(help="Trace file (default: the bundled Azure conv slice).")] = None,
        out: Annotated[Path, typer.Option("--out", help="Output directory (sweep.parquet).")] = Path("sweeps/latest"),
        set_: Sets = None, grid: Grid = None, backend: Backend = "local", address: Address = None,
        jobs: Jobs = None, max_retries: Retries = 3, retry_failed: RetryFailed = False,
        request_rate: o.RequestRate = None, burstiness: o.Burstiness = None,
        max_concurrency: o.MaxConcurrency = None,
        *, bench: VllmBench | None = None, cfg: SimConfig,
    ) -> None:
        """Simulate every point of a grid; append each result to DIR/sweep.parquet as it finishes.

        Rerunning into the same DIR skips points already recorded (keyed by config + trace hash).
        --max-concurrency N sends every point's trace by N clients; --set max_concurrency=4,8,...
        sweeps it (column max_concurrency, empty for an open loop).
        """
        base = cfg.model_dump(exclude_unset=True)
        spec = load_grid_yaml(grid) if grid else {}
        for k, vals in parse_sets(set_ or []).items():
            spec[k] = vals
        if not spec:
            raise ConfigError("sweep: give the grid with --set KEY=v1,v2 or --grid FILE.yaml")
        with_clients(spec, max_concurrency, bench)
        load = o.load_of(request_rate, burstiness, bench, o.rescaled(cfg) or bool({"rate_scale", "total_rate"} & set(spec)))
        if load.given:
            spec, trace = sent_traces(load, spec, trace, out, cfg.seed)
        if trace is None and "trace" not in spec:
            from sim.cli.simulate import bundled_trace
            trace = bundled_trace()
        check_block_sizes(spec.get("block_size", [cfg.block_size]))
        points = expand(spec, base, trace)
        console = Console(stderr=True)
        n_jobs = jobs or os.cpu_count() or 1
        with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("[red]{task.fields[failed]} failed"), TimeElapsedColumn(),
                      TextColumn("ETA"), TimeRemainingColumn(), console=console,
                      disable=not console.is_terminal) as prog:
            task = prog.add_task("sweep", total=len(points), failed=0)
            plain = Stages(console, "points")  # not a terminal: a plain line every few seconds

            def tick(done: int, total: int, failed: int) -> None:
                prog.update(task, completed=min(done, total), total=max(total, done), failed=failed)
                if not console.is_terminal:
                    plain.update("sweep" + (f" ({failed} failed)" if failed else ""), done, total)

            res = run_sweep(points, out, backend=backend, jobs=n_jobs, address=address,
                            max_retries=max_retries, retry_failed=retry_failed, progress=tick)
        console.print(f"{res.planned} points: ran {res.ran}, skipped {res.skipped} already done, "
                      f"{res.failed} failed -> {out / 'sweep.parquet'} ({len(res.table)} rows)")
        keys = {p.key for p in points}
        bad = res.table[res.table["key"].isin(keys) & (res.table["status"] != "ok")]
        if len(bad):
            for _, r in bad.head(5).iterrows():
                console.print(f"[red]failed[/red] {r['key']}: {escape(str(r['error']))}", highlight=False)
            again = "" if res.failed == len(bad) else " (rerun with --retry-failed to try the earlier ones again)"
            typer.secho(f"error: {len(bad)} of {res.planned} sweep points failed{again}", err=True, fg="red")
            raise typer.Exit(1)


def with_clients(spec: dict[str, list[Any]], flag: int | None, bench: VllmBench | None) -> None:
    """Every point's clients: --max-concurrency (else a pasted bench line's) when the grid does not
    sweep them; the flag and the swept key at once are refused (which one would the user mean?)."""
    if flag is not None and CLIENTS_KEY in spec:
        raise ConfigError(f"--max-concurrency {flag} and a swept {CLIENTS_KEY}: give one")
    n = flag if flag is not None else bench.max_concurrency if bench is not None else None
    if n is not None and CLIENTS_KEY not in spec:
        spec[CLIENTS_KEY] = [n]


def sent_traces(load: Load, spec: dict[str, list[Any]], trace: Path | None, out: Path,
                seed: int) -> tuple[dict[str, list[Any]], None]:
    """The grid with each trace replaced by what ``load`` sends (--request-rate times, the first
    --num-prompts, or a pasted line's dataset), written to OUT/workloads/ as Parquet: a sweep point
    names its trace by path, and the content hash in the name keeps resumed sweeps apart. The
    arrivals are drawn once, with --seed (a swept seed does not redraw them)."""
    from sim.cli.simulate import bundled_trace
    from workloads.load import workload_of
    from workloads.writer import write_trace

    folder = out / "workloads"
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    paths: list[Path | None] = [Path(str(x)) for x in spec.get("trace", [])] or [trace]
    for p in paths:
        tr = workload_of(load, p, bundled_trace(), seed)
        name = p.stem if p is not None else f"vllm-{load.dataset.dataset}" if load.dataset else bundled_trace().stem
        dest = folder / f"{name}-{tr.content_hash}.parquet"
        if not dest.exists():
            write_trace(tr.df, dest)
        made.append(str(dest))
    return {**spec, "trace": made}, None
