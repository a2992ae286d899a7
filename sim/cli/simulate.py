"""`kvsim simulate TRACE --out DIR`: replay a trace through one replica."""

from __future__ import annotations

import math
import time
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sim.cli import options as o
from sim.cli.cluster import ClusterHelp, refuse_single_only, simulate_cluster
from sim.cli.headline import headline_rows
from sim.cli.notices import check_block_sizes, check_servegen_rate
from sim.cli.progress import progress
from sim.config.bench_result import bench_result, check_writable, write_result
from sim.config.schema import SimConfig
from sim.config.vllm_bench import VllmBench
from sim.io import fmt
from sim.run.clients import ClientSpec
from sim.run.simulate import SimResult
from sim.run.simulate import simulate as run_simulation
from workloads.load import Load, workload_of
from workloads.schema import Trace
from workloads.stats import has_prefix_info

BUNDLED = "azure_conv_slice.csv"


def bundled_trace() -> Path:
    return Path(str(resources.files("workloads").joinpath("data", BUNDLED)))


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
        *headline_rows(s.num_finished, s.num_rejected, s.simulated_s, s.throughput.requests_per_s,
                       s.throughput.output_tokens_per_s, s.load,
                       {k: (p.p50, p.p90, p.p99) for k, p in (("TTFT", s.ttft_s), ("TPOT", s.tpot_s), ("E2E", s.e2e_s))},
                       tuple(escape(note) for note in s.trace.notes)),
    ]
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
    rows.append(api_server_row(res))
    rows.append(("steps (fast-forwarded)", f"{s.num_steps:,} ({s.fast_forward_steps:,})"))
    lo, hi = s.cost_band
    rows.append(("step-time basis (error band)", (f"{s.cost_basis} ({100 * lo:+.0f}% / {100 * hi:+.0f}%)"
                 if hi or lo else s.cost_basis) + (f"; {escape(s.cost_regime['detail'])}" if s.cost_regime else "")))
    if s.cost_regime:  # the held-out mean E2E / TTFT bands of the stack's fit (widened outside its regime)
        rows.append(("E2E / TTFT error band", " ; ".join(f"{100 * a:+.0f}% / {100 * b:+.0f}%"
                                                         for a, b in (s.cost_band_e2e, s.cost_band_ttft))))
    tm = s.timings
    rows.append(("wall time load / simulate / write", fmt.durations((tm.load_s, tm.simulate_s, tm.write_s))))
    for r in rows:
        t.add_row(*r)
    return t


def api_server_row(res: SimResult) -> tuple[str, str]:
    """The front-end's row: its profile, and what it added (ingress: queue + service before the
    engine; egress: the delay it added to the last token), from the run's request columns."""
    a = res.summary.api_server
    if not a.count:
        return ("API server", "none modelled (--api-server-count 0)")
    q = res.requests
    ing, eg = q["api_ingress_s"].dropna().to_numpy(), q["api_egress_s"].dropna().to_numpy()
    added = (f"; ingress p50/p99 {fmt.durations(tuple(float(np.percentile(ing, x)) for x in (50, 99)))}, "
             f"last-token egress p50/p99 {fmt.durations(tuple(float(np.percentile(eg, x)) for x in (50, 99)))}"
             if len(ing) and len(eg) else "")
    return ("API server", f"{a.count} x {a.endpoint}, {escape(a.profile)}{added}")  # sources: summary.json


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
                                                     "decode), links, router; every key: --cluster-help. The "
                                                     "flags here are every instance's defaults.")] = None,
        cluster_help: ClusterHelp = False,
        summary_only: o.SummaryOnly = False,
        stream: o.Stream = False,
        request_rate: o.RequestRate = None,
        burstiness: o.Burstiness = None,
        save_result: o.SaveResult = None,
        max_concurrency: o.MaxConcurrency = None,
        *, bench: VllmBench | None = None, keys: dict[str, Any], cfg: SimConfig,
    ) -> None:
        """Replay a trace through the KV allocator and scheduler; write requests/steps/summary."""
        load = o.load_of(request_rate, burstiness, bench, o.rescaled(cfg))
        clients = ClientSpec(max_concurrency if max_concurrency is not None else
                             bench.max_concurrency if bench is not None else None)
        if cluster is not None:  # the cluster runtime (sim/cli/cluster.py): the flags are every instance's defaults
            refuse_single_only(check=check, summary_only=summary_only, stream=stream, save_result=save_result)
            ctr = workload_of(load, trace, bundled_trace(), cfg.seed, fmt=format, skip_bad=skip_bad)
            check_servegen_rate(ctr, cfg.rate_scale, cfg.total_rate)
            return simulate_cluster(cluster, ctr, out, keys, clients)
        if save_result is not None:
            check_writable(save_result)
        console = Console(stderr=True)
        if cfg.allocator == "paged":
            check_block_sizes([cfg.block_size])
        t0 = time.perf_counter()
        tr = workload_of(load, trace, bundled_trace(), cfg.seed, fmt=format, skip_bad=skip_bad)
        load_s = time.perf_counter() - t0
        if load.request_rate is None:  # (a request rate replaced the archive's published times)
            check_servegen_rate(tr, cfg.rate_scale, cfg.total_rate)
        if tr.num_bad_rows:
            console.print(f"[yellow]skipped {tr.num_bad_rows} malformed row(s) in {tr.path}[/yellow]")
        with progress(console, "requests", enabled=tr.num_requests >= 2000) as prog:
            res = run_simulation(cfg, tr, check=check, load_s=load_s, summary_only=summary_only,
                                 stream_to=out if stream and not summary_only else None,
                                 progress=lambda done, total: prog.update("simulating", done, total),
                                 clients=clients)
        res.write(out)
        Console().print(summary_table(res, has_prefix_info(tr)))
        console.print(f"wrote {out}/summary.json" if res.tables == "summary" else
                      f"wrote {out}/requests.parquet, steps.parquet, summary.json")
        if save_result is not None:
            write_result({**result_doc(res, load, tr, bench), "max_concurrency": clients.max_concurrency}, save_result)
            console.print(f"wrote {save_result} (vllm bench serve result shape)")


def result_doc(res: SimResult, load: Load, tr: Trace, bench: VllmBench | None) -> dict[str, Any]:
    """The ``--save-result`` document of a run (:mod:`sim.config.bench_result`): the rate the
    arrivals were drawn at (a dataset without one: vLLM's default, inf), kvsim's provenance."""
    rate = load.request_rate if load.request_rate is not None else math.inf if tr.format == "dataset" else None
    s = res.summary
    prov = {"version": s.kvsim_version, "cost_model": s.cost_model, "cost_basis": s.cost_basis,
            "cost_band": {"optimistic": s.cost_band[0], "pessimistic": s.cost_band[1]},
            "gpu": res.config.gpu, "tensor_parallel_size": res.config.tensor_parallel_size,
            "trace": {"path": tr.path, "format": tr.format, "content_hash": s.trace.content_hash, "notes": list(tr.notes)},
            "config": s.config}
    return bench_result(res.requests, model=res.config.model, request_rate=rate,
                        burstiness=(load.burstiness or 1.0) if rate is not None else None, provenance=prov,
                        percentiles=bench.percentiles if bench is not None else (99.0,))
