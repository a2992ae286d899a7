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
        if "equal_share" in ts:
            typer.echo(f"  timestamps      {fmt.percent(ts['equal_share'])} of gaps are 0, distinct times "
                       f"{fmt.duration(ts['granularity_s'])} apart (median)"
                       + (": coarse, spread by simulate (--no-arrival-jitter: as-is)" if ts["coarse"] else ""))
        typer.echo(f"  arrival rule    {ts['rule']}")
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
def gen(spec: Annotated[Path, typer.Argument(help="YAML spec: a generator spec, a benchmark dataset (dataset: random | "
                                                  "prefix_repetition | sharegpt | isl_osl), an inference-perf config or "
                                                  "a multi-turn session spec (sessions: ...); "
                                                  "or OUT alone with a `vllm bench serve` line after `--`.")],
        out: Annotated[Path | None, typer.Argument(help="Output file: .parquet, .csv or .jsonl (an ISL/OSL grid: one "
                                                        "file per point, OUT's name + _isl{I}_osl{O}).")] = None,
        seed: Annotated[int | None, typer.Option("--seed", min=0, help="overrides the spec's seed")] = None,
        vllm_args: Annotated[str | None, typer.Option("--vllm-args", help="A pasted `vllm bench serve ...` line (or "
                                                      "after `--`): its dataset and load flags make the trace.")] = None) -> None:
    """Generate a synthetic trace from a YAML spec or a `vllm bench serve` line (Parquet, CSV or JSONL by suffix)."""
    from workloads.bench import build_yaml, is_bench_yaml
    from workloads.gen import generate
    from workloads.gen.generate import parse_spec, read_spec_yaml
    from workloads.writer import output_kind

    if vllm_args is not None:
        if out is not None:
            raise ConfigError("trace gen: with a `vllm bench serve` line give only OUT (the line is the spec)")
        return _gen_bench_line(vllm_args, spec, seed)
    if out is None:
        raise ConfigError("trace gen: give SPEC and OUT (or OUT and a `vllm bench serve` line after `--`)")
    output_kind(out)
    raw = read_spec_yaml(spec)
    if isinstance(raw, dict) and "sessions" in raw:  # a multi-turn session spec (workloads/sessions.py)
        from workloads.sessions import generate_sessions, parse_sessions

        ss = parse_sessions(raw, str(spec))
        s = seed if seed is not None else (ss.seed if ss.seed is not None else 0)
        _write(generate_sessions(ss, np.random.default_rng(s)), out, (f"seed {s}", "sessions: closed loop"))
        return
    if is_bench_yaml(raw):
        for b in build_yaml(raw, str(spec), seed):
            _write(b.df, _point_path(out, b.label), b.notes)
        return
    sp = parse_spec(raw, str(spec))
    s = seed if seed is not None else (sp.seed if sp.seed is not None else 0)
    df = generate(sp, np.random.default_rng(s))
    _write(df, out, (f"seed {s}",))


def _point_path(out: Path, label: str) -> Path:
    return out.with_name(f"{out.stem}_{label}{out.suffix}") if label else out


def _write(df: Any, out: Path, notes: tuple[str, ...]) -> None:
    from workloads.writer import write_trace

    write_trace(df, out)
    typer.echo(f"wrote {len(df):,} requests to {out}")
    for n in notes:
        typer.echo(f"  {n}")


def _gen_bench_line(line: str, out: Path, seed: int | None) -> None:
    """``kvsim trace gen OUT -- vllm bench serve ...``: the line's dataset at its load."""
    from sim.config.vllm_bench import is_bench_line, parse_vllm_bench
    from workloads.load import load_workload
    from workloads.writer import output_kind

    if not is_bench_line(line):
        raise ConfigError("trace gen: the pasted line must be `vllm bench serve ...` (a `vllm serve` line has no load)")
    output_kind(out)
    bench = parse_vllm_bench(line)
    if msg := bench.ignored_line():
        typer.echo(msg, err=True)
    tr = load_workload(bench.load, None, seed if seed is not None else int(bench.config.get("seed", 0)))
    _write(tr.df, out, tr.notes)


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


def _register_more() -> None:
    from sim.cli.trace_prefix import register  # `kvsim trace prefix`: the fleet prefix what-if

    register(app)


_register_more()
