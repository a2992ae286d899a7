"""``kvsim trace``: look at, convert, generate and cut request traces."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from sim.errors import ConfigError
from sim.io import fmt
from workloads.loader import FORMATS, detect_format, load_trace
from workloads.readers.base import ReadOptions

app = typer.Typer(help="Inspect, convert, generate and slice request traces.", no_args_is_help=True,
                  add_completion=False)

FmtOpt = Annotated[str | None, typer.Option("--format", help=f"override detection: {', '.join(FORMATS)}")]
SkipOpt = Annotated[bool, typer.Option("--skip-bad", help="drop malformed rows, count and list them")]
ModelOpt = Annotated[list[str] | None, typer.Option("--model", help="BurstGPT: keep this Model (repeatable)")]
LogOpt = Annotated[list[str] | None, typer.Option("--log-type", help="BurstGPT: keep this Log Type (repeatable)")]
RateOpt = Annotated[float | None, typer.Option("--rate", help="length-only tables: Poisson req/s (default: all at t=0)")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="seed for any random choice")]
TotalOpt = Annotated[float | None, typer.Option("--total-rate", help="ServeGen: aggregate req/s")]
WinStartOpt = Annotated[float, typer.Option("--window-start", help="ServeGen: window start, s")]
WinDurOpt = Annotated[float, typer.Option("--window-duration", help="ServeGen: window length, s")]
ClientsOpt = Annotated[str | None, typer.Option("--clients", help="ServeGen: comma-separated client ids")]
TraceIn = Annotated[Path, typer.Argument(help="Trace file: any format kvsim reads (see --format).")]
TraceOut = Annotated[Path, typer.Argument(help="Output file: .parquet, .csv or .jsonl.")]


def _opts(model: list[str] | None, log_type: list[str] | None, rate: float | None, seed: int,
          total_rate: float | None, window_start: float, window_duration: float,
          clients: str | None) -> ReadOptions:
    sg: dict[str, object] = {"start_s": window_start, "duration_s": window_duration}
    if total_rate is not None:
        sg["total_rate"] = total_rate
    if clients:
        try:
            sg["clients"] = [int(c) for c in clients.split(",")]
        except ValueError:
            raise ConfigError(f"--clients must be comma-separated integers, got {clients!r}") from None
    if rate is not None and rate <= 0:
        raise ConfigError(f"--rate must be > 0, got {rate}")
    return ReadOptions(models=tuple(model or ()), log_types=tuple(log_type or ()), rate=rate,
                       seed=seed, servegen=sg)


def _print_human(s: dict[str, Any]) -> None:
    """One number format throughout (:mod:`sim.io.fmt`): 3 significant digits, separators, no exponents."""
    n = fmt.num
    typer.echo(f"{s['file']}  ({s['format']})")
    typer.echo(f"  requests        {s['num_requests']:,} over {fmt.duration(s['span_s'])}, "
               f"mean rate {n(s['rate_per_s'])} req/s")
    typer.echo(f"  burstiness      inter-arrival CV {n(s['interarrival_cv'])}, peak {n(s['peak_per_s'])} req in one "
               f"second, per-minute rate {n(s['minute_rate_min'])}..{n(s['minute_rate_max'])} req/s")
    for col in ("prompt_tokens", "output_tokens"):
        d = s[col]
        typer.echo(f"  {col:<15} " + "  ".join(f"{q} {n(d[q])}" for q in ("mean", "p50", "p90", "p99", "min", "max")))
    if "timestamps" in s:
        ts = s["timestamps"]
        typer.echo(f"  timestamps      {fmt.percent(ts['equal_share'])} of gaps are 0, distinct times "
                   f"{fmt.duration(ts['granularity_s'])} apart (median)"
                   + (": coarse, spread by simulate (--no-arrival-jitter: as-is)" if ts["coarse"] else ""))
    if "prefix_reuse" in s:
        typer.echo(f"  prefix reuse    {fmt.percent(s['prefix_reuse'])} of {s['block_refs']:,} block refs "
                   f"({s['unique_blocks']:,} unique, {s.get('tokens_per_hash', '?')} tokens/block)")
    for note in s["notes"]:
        typer.echo(f"  note: {note}")
    for msg in s["bad_rows"][:20]:
        typer.echo(f"  bad row: {msg}")


@app.command()
def info(file: TraceIn, format: FmtOpt = None,
         json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (raw numbers, for scripts).")] = False,
         plot: Annotated[Path | None, typer.Option("--plot", help="write a PNG here")] = None,
         skip_bad: SkipOpt = False, model: ModelOpt = None, log_type: LogOpt = None,
         rate: RateOpt = None, seed: SeedOpt = 0, total_rate: TotalOpt = None,
         window_start: WinStartOpt = 0.0, window_duration: WinDurOpt = 3600.0,
         clients: ClientsOpt = None) -> None:
    """Counts, span, length percentiles, arrival rate, burstiness and prefix reuse."""
    from workloads.stats import trace_stats

    fmt = format or detect_format(file)
    if fmt == "servegen" and total_rate is None:
        from workloads.servegen_info import servegen_summary

        s = servegen_summary(file)
        typer.echo(json.dumps(s, indent=None if json_out else 2))
        return
    tr = load_trace(file, fmt, skip_bad, _opts(model, log_type, rate, seed, total_rate, window_start,
                                               window_duration, clients))
    s = {"file": str(file), "format": tr.format, **trace_stats(tr.df), "num_bad_rows": tr.num_bad_rows,
         "bad_rows": list(tr.bad_rows), "notes": list(tr.notes)}
    if plot is not None:
        from workloads.plot import plot_trace

        plot_trace(tr.df, plot, f"{file.name} ({tr.format}, {tr.num_requests:,} requests)")
    if json_out:
        typer.echo(json.dumps(s))
    else:
        _print_human(s)


@app.command()
def convert(file: TraceIn, out: Annotated[Path, typer.Argument(help="Output .parquet file.")], format: FmtOpt = None, skip_bad: SkipOpt = False,
            model: ModelOpt = None, log_type: LogOpt = None, rate: RateOpt = None, seed: SeedOpt = 0,
            total_rate: TotalOpt = None, window_start: WinStartOpt = 0.0,
            window_duration: WinDurOpt = 3600.0, clients: ClientsOpt = None) -> None:
    """Write any supported trace as normalized Parquet (streamed chunk by chunk)."""
    from workloads.convert import convert as do_convert
    from workloads.writer import write_trace

    if out.suffix != ".parquet":
        raise ConfigError(f"{out}: convert writes Parquet; the output must end in .parquet")
    opts = _opts(model, log_type, rate, seed, total_rate, window_start, window_duration, clients)
    t0 = time.perf_counter()
    if (format or detect_format(file)) == "servegen":
        tr = load_trace(file, "servegen", skip_bad, opts)
        write_trace(tr.df, out)
        rows, bad, notes = tr.num_requests, list(tr.bad_rows), list(tr.notes)
    else:
        res = do_convert(file, out, format, skip_bad, opts)
        rows, bad, notes = res.rows, list(res.bad_rows), list(res.notes)
        if res.resorted:
            notes.append("note: re-sorted by arrival time (the input was not in arrival order)")
    typer.echo(f"wrote {rows:,} requests to {out} in {time.perf_counter() - t0:.2f} s")
    for line in (*notes, *bad[:20]):
        typer.echo(f"  {line}")


@app.command()
def gen(spec: Annotated[Path, typer.Argument(help="YAML generator spec.")], out: TraceOut, seed: Annotated[int | None, typer.Option("--seed", min=0, help="overrides the spec's seed")] = None) -> None:
    """Generate a synthetic trace from a YAML spec (Parquet, CSV or JSONL by suffix)."""
    from workloads.gen import generate, load_spec
    from workloads.writer import output_kind, write_trace

    output_kind(out)
    sp = load_spec(spec)
    s = seed if seed is not None else (sp.seed if sp.seed is not None else 0)
    df = generate(sp, np.random.default_rng(s))
    write_trace(df, out)
    typer.echo(f"wrote {len(df):,} requests to {out} (seed {s})")


@app.command("slice")
def slice_(file: TraceIn, out: TraceOut, start: Annotated[float, typer.Option("--start", help="window start, s")] = 0.0,
           duration: Annotated[float | None, typer.Option("--duration", help="window length, s")] = None,
           rate_scale: Annotated[float, typer.Option("--rate-scale", help=">1 compresses time")] = 1.0,
           sample: Annotated[float, typer.Option("--sample", help="keep each request with this probability")] = 1.0,
           seed: SeedOpt = 0, format: FmtOpt = None, skip_bad: SkipOpt = False) -> None:
    """Cut a time window, rescale time and/or subsample; writes Parquet, CSV or JSONL."""
    from workloads.slicing import slice_trace
    from workloads.writer import output_kind, write_trace

    output_kind(out)
    tr = load_trace(file, format, skip_bad)
    df = slice_trace(tr.df, start=start, duration=duration, rate_scale=rate_scale, sample=sample,
                     rng=np.random.default_rng(seed))
    write_trace(df, out)
    typer.echo(f"wrote {len(df):,} of {tr.num_requests:,} requests to {out}")
