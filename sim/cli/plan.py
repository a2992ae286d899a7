"""`kvsim plan TRACE`: the cheapest GPU fleet that meets latency SLOs, why, and how sure."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.console import Console

from sim.cli import options as o
from sim.cli.plan_table import closed_clients, rich_table
from sim.cli.progress import progress
from sim.cluster.router import POLICIES
from sim.cluster.slo import QUANTILES, Slo, SloTarget
from sim.errors import ConfigError
from sim.fleet.candidate import KNOBS, grid
from sim.fleet.explain import INFEASIBLE, tp_refusal
from sim.fleet.planner import PlanSpec, run_plan
from sim.fleet.prices import load_prices
from sim.fleet.tuning import tuned_knobs, with_base_knobs
from sim.fleet.xpyd_plan import parse_splits, split_routers
from sim.model.catalog import resolve_gpu, resolve_model

_TTFT, _TPOT, _E2E = "time to first token", "time per output token after the first", "end-to-end latency"


def _slo_help(q: str, what: str) -> str:
    return f"SLO: the {q} {what} must be <= this many seconds (unset: no target)."


SloTtftP50 = Annotated[float | None, typer.Option("--slo-ttft-p50", help=_slo_help("p50", _TTFT))]
SloTtftP90 = Annotated[float | None, typer.Option("--slo-ttft-p90", help=_slo_help("p90", _TTFT))]
SloTtftP99 = Annotated[float | None, typer.Option("--slo-ttft-p99", help=_slo_help("p99", _TTFT))]
SloTpotP50 = Annotated[float | None, typer.Option("--slo-tpot-p50", help=_slo_help("p50", _TPOT))]
SloTpotP90 = Annotated[float | None, typer.Option("--slo-tpot-p90", help=_slo_help("p90", _TPOT))]
SloTpotP99 = Annotated[float | None, typer.Option("--slo-tpot-p99", help=_slo_help("p99", _TPOT))]
SloE2eP50 = Annotated[float | None, typer.Option("--slo-e2e-p50", help=_slo_help("p50", _E2E))]
SloE2eP90 = Annotated[float | None, typer.Option("--slo-e2e-p90", help=_slo_help("p90", _E2E))]
SloE2eP99 = Annotated[float | None, typer.Option("--slo-e2e-p99", help=_slo_help("p99", _E2E))]


def _list(text: str | None, kind: type, flag: str) -> list[Any]:
    if text is None:
        return []
    out = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            raise ConfigError(f"{flag} {text!r}: empty item in the comma-separated list")
        try:
            out.append(kind(part))
        except ValueError:
            raise ConfigError(f"{flag} {text!r}: {part!r} is not a valid {kind.__name__}") from None
    return out


def build_slo(values: dict[str, float | None], attainment: float | None) -> Slo:
    targets = []
    for key, v in values.items():
        if v is None:
            continue
        metric, q = key.split("_")
        targets.append(SloTarget(metric, QUANTILES[q], float(v)))  # type: ignore[arg-type]
    return Slo(tuple(targets), attainment)


def _check(args: dict[str, Any]) -> None:
    if args["rate_scale"] is not None and args["target_qps"] is not None:
        raise ConfigError("--rate-scale and --target-qps are exclusive: give one")
    for flag in ("rate_scale", "target_qps", "peak_window", "bucket"):
        v = args[flag]
        if v is not None and not v > 0:
            raise ConfigError(f"--{flag.replace('_', '-')} {v!r}: must be > 0")
    if args["backend"] not in ("local", "ray"):
        raise ConfigError(f"--backend {args['backend']!r}: expected local or ray")
    if args["address"] and args["backend"] != "ray":
        raise ConfigError("--address needs --backend ray")
    split_routers(args["router"])  # each spec, or a one-line error naming --router
    if args["pd_threshold"] and args["disagg"] is None:
        raise ConfigError("--pd-threshold needs --disagg (it routes xPyD groups' short prompts)")
    if args["link_gbps"] is not None and not args["link_gbps"] > 0:
        raise ConfigError(f"--link-gbps {args['link_gbps']!r}: must be > 0 (GB/s per lane)")
    for flag, lo in (("seeds", 1), ("window", 50), ("workers", 1), ("search_iters", 0), ("n_plus_k", 0)):
        if args[flag] < lo:
            raise ConfigError(f"--{flag.replace('_', '-')} {args[flag]}: must be >= {lo}")
    for flag in ("headroom", "cold_start"):
        if args[flag] < 0:
            raise ConfigError(f"--{flag.replace('_', '-')} {args[flag]}: must be >= 0")
    if args["price_point"] not in ("low", "typical", "high"):
        raise ConfigError(f"--price-point {args['price_point']!r}: expected low, typical or high")


def register(app: typer.Typer) -> None:
    @app.command()
    @o.more_simulate_flags(skip=frozenset({"tensor_parallel_size", "total_rate"}))
    def plan(
        trace: Annotated[Path | None, typer.Argument(help="Trace file (any format kvsim reads; optional after a `vllm bench serve` dataset line).")] = None,
        model: Annotated[str | None, typer.Option("--model", help="Catalog name, HF id or config.json (default llama-3.1-8b).")] = None,
        gpu: Annotated[str, typer.Option("--gpu", help="Comma-separated catalog GPUs, e.g. h100,a100-80gb,l40s.")] = "h100",
        tp: Annotated[str | None, typer.Option("--tp", "--tensor-parallel-size", "-tp",
                                               help="Comma-separated tensor-parallel degrees, e.g. 1,2 (default 1).")] = None,
        slo_ttft_p50: SloTtftP50 = None, slo_ttft_p90: SloTtftP90 = None, slo_ttft_p99: SloTtftP99 = None,
        slo_tpot_p50: SloTpotP50 = None, slo_tpot_p90: SloTpotP90 = None, slo_tpot_p99: SloTpotP99 = None,
        slo_e2e_p50: SloE2eP50 = None, slo_e2e_p90: SloE2eP90 = None, slo_e2e_p99: SloE2eP99 = None,
        attainment: Annotated[float | None, typer.Option(help="Joint share of requests meeting every SLO, e.g. 0.99.")] = None,
        backend: Annotated[str, typer.Option(help="local (process pool) | ray")] = "local",
        address: Annotated[str | None, typer.Option(help="Ray cluster address (with --backend ray).")] = None,
        workers: Annotated[int, typer.Option(help="Parallel workers (local) / CPUs of a local Ray.")] = os.cpu_count() or 1,
        rate_scale: Annotated[float | None, typer.Option(help="Multiply the trace's arrival rate.")] = None,
        target_qps: Annotated[float | None, typer.Option("--target-qps", "--total-rate",
                                                         help="Rescale the trace to this mean QPS (req/s).")] = None,
        prices: Annotated[Path | None, typer.Option(help="YAML of $/GPU-hour overrides.")] = None,
        price_point: Annotated[str, typer.Option(help="low | typical | high catalog price.")] = "typical",
        n_plus_k: Annotated[int, typer.Option(help="Spare replicas for failures (N+k).")] = 0,
        headroom: Annotated[float, typer.Option(help="Extra capacity over peak, e.g. 0.2.")] = 0.0,
        router: Annotated[str, typer.Option(help=f"Router spec(s), comma-separated: {' | '.join(POLICIES)} (options as in "
                                            "simulate). Unified fleets are validated behind the first; each "
                                            "xPyD split is searched behind each.")] = "least-outstanding-tokens",
        disagg: Annotated[str | None, typer.Option("--disagg", help="Also search disaggregated prefill/decode "
                                                   "splits (llm-d's xPyD), comma-separated: 1P3D, 1P3D:P/D with a TP, "
                                                   "GPU or GPUxTP per role (1P3D:2/1, 1P3D:h200/h100, "
                                                   "1P3D:h200x2/h100x1), or N (every split of N instances).")] = None,
        pd_threshold: Annotated[int, typer.Option("--pd-threshold", help="llm-d's PD threshold: a prompt whose "
                                                  "uncached part is under this many tokens prefills on its decode "
                                                  "instance (0: every prompt goes to a prefill instance).")] = 0,
        link: Annotated[str, typer.Option(help="KV link kind between prefill and decode (links.yaml).")] = "rdma-ndr",
        link_gbps: Annotated[float | None, typer.Option(help="Override the link's GB/s per lane.")] = None,
        seeds: Annotated[int, typer.Option(help="Replications (trace windows) per candidate.")] = 3,
        seed: Annotated[int, typer.Option(min=0, help="Base seed.")] = 0,
        window: Annotated[int, typer.Option(help="Requests per capacity-search window.")] = 2000,
        search_iters: Annotated[int, typer.Option(help="Bisection steps after bracketing.")] = 3,
        peak_window: Annotated[float, typer.Option(help="Seconds over which peak demand is averaged.")] = 300.0,
        bucket: Annotated[float, typer.Option(help="Autoscaler decision interval, seconds.")] = 60.0,
        cold_start: Annotated[float, typer.Option(help="Seconds before a new replica serves.")] = 120.0,
        validate: Annotated[bool, typer.Option("--validate/--no-validate", help="Routed replay of the full trace.")] = True,
        band: Annotated[bool, typer.Option("--band/--no-band", help="Also size each GPU x TP at the pessimistic edge "
                                           "of the cost model's step-time error band (recommended).")] = True,
        gpu_memory_utilization: Annotated[str | None, typer.Option(help="Knob values to search, e.g. 0.9,0.95.")] = None,
        block_size: Annotated[str | None, typer.Option(help="Knob values, e.g. 16,32.")] = None,
        max_num_seqs: Annotated[str | None, typer.Option(help="Knob values, e.g. 128,256.")] = None,
        max_num_batched_tokens: Annotated[str | None, typer.Option(help="Knob values, e.g. 2048,8192.")] = None,
        allocator: Annotated[str | None, typer.Option(help="Knob values: paged,slab.")] = None,
        preemption: Annotated[str | None, typer.Option(help="Knob values: recompute,swap.")] = None,
        cost_model: o.Cost = None, calibration: o.Calib = None, serving_stack: o.Stack = None, preset: o.Preset = None,
        max_model_len: o.MML = None, enable_prefix_caching: o.EPC = None,
        format: Annotated[str | None, typer.Option("--format", help="Trace format override.")] = None,
        out: Annotated[Path | None, typer.Option(help="Bundle directory (default reports/plan-<id>/).")] = None,
        request_rate: o.RequestRate = None, burstiness: o.Burstiness = None, max_concurrency: o.MaxConcurrency = None,
        *, sim_flags: dict[str, Any],
    ) -> None:
        """Find the cheapest fleet (GPU, TP, replicas, knobs) that meets the SLOs on TRACE.

        Every simulate flag (--kv-cache-dtype, --config, offload, async, spec decode, a pasted
        `vllm serve` line after `--`) sets the replicas' config; --gpu, --tp and the knob flags
        take comma-separated values to search."""
        bench, sim_flags["vllm_args"] = o.bench_line(sim_flags.get("vllm_args"), sim_flags)
        common = o.config_keys(**sim_flags)  # --config, then the vllm serve line, then flags
        model = model or common.pop("model", None) or (bench.config.get("model") if bench else None) or "llama-3.1-8b"
        tp = tp or str(common.pop("tensor_parallel_size", 1))
        common = {k: v for k, v in common.items() if k not in ("model", "tensor_parallel_size")}
        args = dict(locals())
        _check(args)
        load = o.load_of(request_rate, burstiness, bench, rate_scale is not None or target_qps is not None)
        clients, client_rate = closed_clients(max_concurrency, bench, load)
        slo = build_slo({k.removeprefix("slo_"): v for k, v in args.items() if k.startswith("slo_")}, attainment)
        gpus = _list(gpu, str, "--gpu")
        for g in gpus:
            resolve_gpu(g)
        tps = _list(tp, int, "--tp")
        if any(t < 1 for t in tps):
            raise ConfigError(f"--tp {tp!r}: degrees must be >= 1")
        resolve_model(model)
        for t in tps:
            if why := tp_refusal(model, t):
                raise ConfigError(why)  # as simulate refuses it, before any candidate runs
        kinds = {"gpu_memory_utilization": float, "block_size": int, "max_num_seqs": int,
                 "max_num_batched_tokens": int, "allocator": str, "preemption": str}
        knobs = {k: _list(args[k], kinds[k], "--" + k.replace("_", "-")) for k in KNOBS if args[k]}
        base = common | {k: v for k, v in dict(model=model, cost_model=cost_model, calibration=calibration,
                                      serving_stack=serving_stack, preset=preset,
                                      max_model_len=max_model_len, enable_prefix_caching=enable_prefix_caching).items()
                if v is not None}
        routers = split_routers(router)
        splits = parse_splits(disagg, routers, link, link_gbps, threshold=pd_threshold) if disagg is not None else []
        # --disagg: every shape gets the same small batch-limit search (2x max_num_seqs where it binds)
        raise_seqs = bool(splits) and not knobs.get("max_num_seqs")  # a pasted line's knobs show in the rows
        knobs = with_base_knobs(base, tuned_knobs(base, knobs, gpus[0].lower(), adaptive=True) if splits else knobs)
        cands = grid([g.lower() for g in gpus], tps, knobs, splits)
        for c in cands:
            for role in ("unified",) if c.split is None else ("prefill", "decode"):
                c.config(base, role)  # flag-level errors (bad knob values) before any simulation
        price_table = load_prices(prices)
        spec = PlanSpec(
            gpus=[g.lower() for g in gpus], tps=tps, slo=slo, base=base, prices=price_table, knobs=knobs,
            rate_scale=rate_scale or 1.0, target_qps=target_qps, router=routers[0], n_plus_k=n_plus_k,
            headroom=headroom, replications=seeds, seed=seed, window=window, iters=search_iters,
            peak_window_s=peak_window, bucket_s=bucket, cold_start_s=cold_start,
            price_point=price_point,  # type: ignore[arg-type]
            validate=validate, backend=backend, workers=workers, address=address, splits=splits, raise_seqs=raise_seqs,
            max_concurrency=clients, client_rate=client_rate)
        from sim.fleet.provenance import sha256, versions
        from sim.fleet.report import write_bundle
        from workloads.load import workload_of
        console = Console(stderr=True)
        t0 = time.perf_counter()
        tr = workload_of(load, trace, None, load_seed := (int(bench.config.get("seed", seed)) if bench else seed), fmt=format,
                         jitter_seed=int(base.get("seed", 0)) if base.get("arrival_jitter", True) else None)  # a line's --seed draws its load; probes rescale the time, so a coarse clock is spread here
        from sim.cli.notices import check_servegen_rate
        check_servegen_rate(tr, rate_scale or 1.0, target_qps or load.request_rate)  # (a request rate replaced its times)
        inputs = _inputs(args, spec, tr, sha256(Path(tr.path)) if trace else tr.content_hash, versions(backend), len(cands))
        inputs["load"] |= load.as_json(load_seed, with_dataset=trace is None) if load.given else {}  # (in the plan id)
        out_dir = out or Path("reports") / f"plan-{_plan_id(inputs)}"
        with progress(console) as prog:
            result = run_plan(tr.df, spec, prog.update, band=band)
        wall = time.perf_counter() - t0
        inputs["demand"] = {k: round(v, 4) if (v := float(getattr(result.demand, k))) == v else None
                            for k in result.demand.__slots__}
        inputs["wall_s"] = round(wall, 1)
        command = ["kvsim", "plan", *sys.argv[sys.argv.index("plan") + 1:]] if "plan" in sys.argv else ["kvsim", "plan", str(trace)]
        if out is None:
            command += ["--out", str(out_dir)]
        paths = write_bundle(result, out_dir, inputs, command)
        Console(width=200).print(rich_table(result))
        if (result.table.get("headroom_pct", pd.Series(dtype=float)) < 0).any():
            console.print("* negative headroom: the routed replay passed with fewer replicas than peak / capacity "
                          "(replicas share bursts behind the router); see Notes in plan.md", highlight=False)
        for i, r in result.table.iterrows():
            if INFEASIBLE in str(r["note"]):
                console.print(f"#{int(i) + 1} {r['gpu']} tp{r['tp']}: {r['note']}", highlight=False)
        console.print(f"planned {len(cands)} candidates in {wall:.1f} s ({backend}, {workers} workers); "
                      f"wrote {out_dir}/ ({', '.join(p.name for p in paths.values())})")


def _inputs(args: dict[str, Any], spec: PlanSpec, tr: Any, file_hash: str, vers: dict[str, str],
            n_cands: int) -> dict[str, Any]:
    role_gpus = [s.gpu_of(r, g) for s in spec.splits for r in ("prefill", "decode") for g in spec.gpus]
    prices = {g: {"usd_per_gpu_hour": spec.prices[g].at(spec.price_point), "source": spec.prices[g].source,
                  "unverified": spec.prices[g].unverified} for g in dict.fromkeys([*spec.gpus, *role_gpus])}
    from sim.config.schema import make_config
    from sim.fleet.provenance import cost_model_names
    cfg = make_config("plan", **dict(spec.base, gpu=spec.gpus[0]))
    return {
        "model": cfg.model, "trace": {"path": tr.path, "format": tr.format, "rows": tr.num_requests,
                                      "sha256": file_hash, "content_hash": tr.content_hash},
        "gpus": spec.gpus, "tp": spec.tps, "knobs": spec.knobs, "candidates": n_cands, "base_config": spec.base,
        "cost_model": cost_model_names(spec.base, spec.gpus, spec.tps), "slo": spec.slo.describe(), "attainment": spec.slo.attainment,
        "load": {"rate_scale": args["rate_scale"], "target_qps": args["target_qps"],
                 **({"max_concurrency": spec.max_concurrency} if spec.max_concurrency else {})},
        "seeds": {"seed": spec.seed, "replications": spec.replications, "window": spec.window,
                  "keep": 0.9, "warmup": 0.1, "search_iters": spec.iters},
        "router": args["router"], "n_plus_k": spec.n_plus_k,
        **({"disagg": {"splits": args["disagg"], "link": args["link"], "link_gbps": args["link_gbps"],
                       **({"pd_threshold": args["pd_threshold"]} if args["pd_threshold"] else {})}}
           if args["disagg"] else {}), "headroom": spec.headroom,
        "autoscale": {"bucket_s": spec.bucket_s, "cold_start_s": spec.cold_start_s},
        "peak_window_s": spec.peak_window_s, "price_point": spec.price_point, "prices": prices,
        "backend": spec.backend, "workers": spec.workers, "versions": vers,
    }


def _plan_id(inputs: dict[str, Any]) -> str:
    keep = {k: v for k, v in inputs.items() if k not in ("versions", "workers", "backend")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:8]
