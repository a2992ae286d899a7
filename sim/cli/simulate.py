"""`kvsim simulate TRACE --out DIR`: replay a trace through one replica."""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sim.cli import options as o
from sim.cli.notices import check_block_sizes, check_servegen_rate
from sim.cli.progress import progress
from sim.config.schema import SimConfig
from sim.io import fmt
from sim.run.simulate import SimResult
from sim.run.simulate import simulate as run_simulation
from workloads import load_trace
from workloads.schema import Trace

BUNDLED = "azure_conv_slice.csv"


def bundled_trace() -> Path:
    return Path(str(resources.files("workloads").joinpath("data", BUNDLED)))


def has_prefix_info(trace: Trace) -> bool:
    """Whether the trace can hit the prefix cache at all: token ids, prefix hashes or fanned-out samples."""
    df = trace.df
    fans = any(c in df and bool((df[c] > 1).any()) for c in ("n", "beam_width"))
    return fans or any(c in df and bool(df[c].map(lambda v: v is not None and len(v) > 0).any())
                       for c in ("hash_ids", "prompt_token_ids"))


def summary_table(res: SimResult, prefix_info: bool = True) -> Table:
    s = res.summary
    t = Table(title=f"kvsim: {s.trace.path.split('/')[-1]} | {res.config.model} on {res.config.gpu} "
                    f"(tp={res.config.tensor_parallel_size}) | {s.cost_model}", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    cfg = res.config
    alloc = f"paged, block_size={cfg.block_size}" if cfg.allocator == "paged" else \
        f"slab ({cfg.reservation}, {cfg.slab_placement})"
    rows = [
        ("allocator", alloc),
        ("KV blocks (incl. null)", f"{s.num_gpu_blocks:,}"),
        ("requests finished / rejected", f"{s.num_finished:,} / {s.num_rejected:,}"),
        *(("trace note", escape(note)) for note in s.trace.notes),
        ("simulated time", fmt.duration(s.simulated_s)),
        ("throughput", f"{fmt.num(s.throughput.requests_per_s)} req/s, "
                       f"{fmt.num(round(s.throughput.output_tokens_per_s))} out tok/s"),
        ("load (offered vs served)", f"[bold red]{s.load.line()}[/]" if s.load.overloaded else s.load.line()),
    ]
    for k, p in (("TTFT", s.ttft_s), ("TPOT", s.tpot_s), ("E2E", s.e2e_s)):
        if p.p50 is not None and p.p90 is not None and p.p99 is not None:
            rows.append((k + " p50/p90/p99", fmt.durations((p.p50, p.p90, p.p99))))
    m = s.memory
    rows.append(("KV pool: token states / reserved / internal / external / free",
                 " / ".join(f"{100 * m[k]:.1f}%" for k in ("token_state", "reserved", "internal_frag", "external_frag", "free"))))
    rows.append(("preemptions", f"{s.preemptions:,} ({fmt.num(s.preemptions_per_1k)} per 1k req)"))
    rows.append(("prefix cache hit rate", f"{100 * s.prefix_cache.hit_rate:.1f}%" + (
        "" if prefix_info else " (the trace has no prefix information: no hash_ids or prompt_token_ids)")))
    if s.kv_offload.cpu_blocks:  # --kv-offloading-size: the hit per tier
        o = s.kv_offload
        rows.append(("  of which GPU / CPU tier", f"{100 * o.gpu_hit_rate:.1f}% / {100 * o.cpu_hit_rate:.1f}% "
                     f"({o.loaded_blocks:,} blocks loaded, {o.cpu_blocks:,} CPU blocks)"))
    rows.append(("steps (fast-forwarded)", f"{s.num_steps:,} ({s.fast_forward_steps:,})"))
    lo, hi = s.cost_band
    rows.append(("step-time basis (error band)", f"{s.cost_basis} ({100 * lo:+.0f}% / {100 * hi:+.0f}%)"
                 if hi or lo else s.cost_basis))
    tm = s.timings
    rows.append(("wall time load / simulate / write", fmt.durations((tm.load_s, tm.simulate_s, tm.write_s))))
    for r in rows:
        t.add_row(*r)
    return t


def register(app: typer.Typer) -> None:
    @app.command()
    @o.simulate_flags
    def simulate(
        trace: Annotated[Path | None, typer.Argument(help="Trace file (default: the bundled Azure conv slice).")] = None,
        out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path("runs/latest"),
        format: Annotated[str | None, typer.Option("--format", help="Trace format override.")] = None,
        skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip malformed rows (counted) instead of failing.")] = False,
        check: Annotated[bool, typer.Option("--check", help="Verify allocator invariants after every step.")] = False,
        cluster: Annotated[Path | None, typer.Option("--cluster", help="Cluster YAML: instances (unified/prefill/"
                                                     "decode), links, router (sim/cluster/spec.py).")] = None,
        summary_only: o.SummaryOnly = False,
        stream: o.Stream = False,
        *, cfg: SimConfig,
    ) -> None:
        """Replay a trace through the KV allocator and scheduler; write requests/steps/summary."""
        if cluster is not None:  # the cluster runtime (sim/cli/cluster.py)
            from sim.cli.cluster import simulate_cluster
            return simulate_cluster(cluster, trace or bundled_trace(), out, format, skip_bad)
        console = Console(stderr=True)
        if cfg.allocator == "paged":
            check_block_sizes([cfg.block_size])
        t0 = time.perf_counter()
        tr = load_trace(trace or bundled_trace(), fmt=format, skip_bad=skip_bad)
        load_s = time.perf_counter() - t0
        check_servegen_rate(tr, cfg.rate_scale, cfg.total_rate)
        if tr.num_bad_rows:
            console.print(f"[yellow]skipped {tr.num_bad_rows} malformed row(s) in {tr.path}[/yellow]")
        with progress(console, "requests", enabled=tr.num_requests >= 2000) as prog:
            res = run_simulation(cfg, tr, check=check, load_s=load_s, summary_only=summary_only,
                                 stream_to=out if stream and not summary_only else None,
                                 progress=lambda done, total: prog.update("simulating", done, total))
        res.write(out)
        Console().print(summary_table(res, has_prefix_info(tr)))
        console.print(f"wrote {out}/summary.json" if res.tables == "summary" else
                      f"wrote {out}/requests.parquet, steps.parquet, summary.json")
