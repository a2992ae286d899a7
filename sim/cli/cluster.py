"""`kvsim simulate --cluster FILE.yaml TRACE --out DIR`: a cluster of unified or prefill/decode
instances behind a router (:mod:`sim.cluster.spec`; every key: ``--cluster-help``).

The command line applies to every instance: its simulate flags, ``--config`` and a pasted
``vllm serve`` line are each instance's defaults (over the file's ``defaults:``), an instance's
own ``config:`` overrides them and the output lists those overrides. ``--rate-scale``,
``--total-rate``, ``--request-rate`` / ``--burstiness`` and a pasted ``vllm bench serve`` line
shape the cluster's arrivals. What cannot apply to a cluster is refused in one line.

Writes ``requests.parquet`` (request columns + ``instance``, ``prefill_instance``,
``prefill_done_s``, ``transfer_s``, ``kv_wait_s``), ``steps.parquet`` (every instance's steps +
``instance``), ``cluster.json`` (instances with their load, links and their utilisation,
decode-side waits, warnings) and two plots: ``ttft_breakdown.png`` and, with transfers,
``link_utilisation.png``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.cluster.balance import InstanceLoad
    from sim.cluster.disagg import ClusterResult
    from sim.cluster.spec import ClusterSpec
    from sim.run.clients import ClientSpec
    from workloads.schema import Trace


def _print_schema(show: bool) -> None:
    if show:
        from sim.cluster.schema import schema_text

        typer.echo(schema_text())
        raise typer.Exit()


ClusterHelp = Annotated[bool, typer.Option("--cluster-help", callback=_print_schema, is_eager=True,
                                           help="Print the --cluster file's schema (every key, its default, "
                                                "the routers and their options) and exit.")]


def refuse_single_only(**given: Any) -> None:
    """One line for a simulate option the cluster runtime does not take (never ignored)."""
    flags = {"check": "--check", "summary_only": "--summary-only", "stream": "--stream",
             "save_result": "--save-result"}
    for k, flag in flags.items():
        if given.get(k):
            raise ConfigError(f"--cluster: {flag} is not modelled for a cluster run (single replica only); drop it")


def _start_s(req: Any) -> Any:
    """Each request's first step: its prefill's on a prefill instance, else its own."""
    return req["prefill_start_s"].where(req["prefill_instance"] >= 0, req["first_scheduled_s"])


def cluster_json(spec: ClusterSpec, res: ClusterResult, sim_s: float,
                 rows: list[InstanceLoad] | None = None, warnings: list[str] | None = None) -> dict[str, Any]:
    from sim.cluster.balance import hits
    from sim.cluster.links import link_kind
    from sim.io.overload import offered_load
    from sim.io.summary import run_span

    req = res.requests
    inst = []
    for k, i in enumerate(spec.instances):
        mine = req[req["instance"] == k]
        row = {"name": i.name, "role": i.role, "model": i.config.model, "gpu": i.config.gpu,
               "tensor_parallel_size": i.config.tensor_parallel_size,
               "requests": len(mine), "prefills": int((req["prefill_instance"] == k).sum()),
               "busy_s": float(res.steps.loc[res.steps["instance"] == k, "duration_s"].sum()),
               "overrides": {key: {"value": v, "replaced": was} for key, v, was in i.overrides}}
        if rows is not None:
            r = rows[k]
            row.update(fair_share=r.fair_share, busy=r.busy, kv_use=r.kv_use, hit_rate=r.hit_rate,
                       preemptions=r.preemptions, load=asdict(r.load))
        inst.append(row)
    links = []
    for (p, d), link in res.links.items():
        kind = link_kind(str(spec.link_spec(spec.instances[p].name, spec.instances[d].name).get("kind", "rdma-ndr")))
        links.append({"name": link.name, "kind": kind.key, "bandwidth_bytes_per_s": link.bandwidth,
                      "latency_s": link.latency, "bytes_moved": link.bytes_moved,
                      "utilisation": link.utilisation(res.end_s), "source": kind.source, "unverified": kind.unverified})
    fin = req[req["status"] == "finished"]
    hit = hits(req, prefill_side=True).sum()  # where each prompt was computed
    return {"instances": inst, "links": links, "router": spec.router.policy, "flow": spec.flow,
            "threshold": spec.threshold, "requests": len(req), "finished": len(fin),
            "rejected": int((req["status"] == "rejected").sum()),
            "decode_kv_blocked": res.decode_kv_blocked,
            "load": asdict(offered_load(req, _start_s(req))),
            "prefix_hit_rate": float(hit / req["prompt_tokens"].sum()) if len(req) else 0.0,
            **{f"{m}_p{q}_s": float(fin[f"{m}_s"].quantile(q / 100)) if len(fin) else None
               for m in ("ttft", "tpot", "e2e") for q in (50, 90, 99)},  # (as a single replica's summary)
            "output_tokens": int(fin["output_tokens"].sum()),
            "transfer_p99_s": float(fin["transfer_s"].quantile(0.99)) if fin["transfer_s"].notna().any() else None,
            "kv_wait_p99_s": float(fin["kv_wait_s"].quantile(0.99)) if fin["kv_wait_s"].notna().any() else None,
            "simulated_s": run_span(req), "sim_wall_s": round(sim_s, 4), "warnings": warnings or []}


def cost_bases(spec: ClusterSpec, res: ClusterResult) -> list[dict[str, str]]:
    """Each distinct step-cost model of the cluster, the instances it times and its basis for
    their requests, as a single replica's summary says it (:func:`sim.cost.regime.run_regime`:
    fitted only inside the fitted regime)."""
    from sim.cost import basis_of
    from sim.cost.regime import run_regime
    from sim.run.static import static_parts

    by: dict[str, tuple[Any, list[int]]] = {}
    for k, inst in enumerate(spec.instances):
        cost = static_parts(inst.config)[2]
        by.setdefault(cost.name, (cost, []))[1].append(k)
    out = []
    for name, (cost, idx) in by.items():
        basis = basis_of(cost).basis
        req = res.requests[res.requests["instance"].isin(idx)]
        verdict = run_regime(cost, basis, req).report.get("basis") or basis
        out.append({"cost_model": name, "instances": ", ".join(spec.instances[k].name for k in idx), "basis": verdict})
    return out


def prefix_bounds(spec: ClusterSpec, tr: Trace) -> dict[str, float] | None:
    """Where a unified fleet's prefix hit rate can fall (:func:`sim.cluster.whatif.fleet_prefix_bounds`,
    per-replica caches of the first instance's KV pool): None for P/D, a trace without prompt
    content (nothing can hit), or a session trace (the bounds read an open loop's order)."""
    from sim.cluster.whatif import fleet_prefix_bounds
    from sim.run.build import build
    from workloads.schema import has_sessions
    from workloads.stats import has_prefix_info

    cfg = spec.instances[0].config
    if spec.disaggregated or not has_prefix_info(tr) or has_sessions(tr.df):
        return None
    kv = build(cfg).kv
    if not kv.paged or not kv.enable_caching:
        return None
    tokens = kv.usable_blocks * cfg.block_size
    b = fleet_prefix_bounds(tr, len(spec.instances), tokens, cfg)
    return {k: getattr(b, k).hit_rate for k in ("per_replica", "shared", "unbounded")}


def override_lines(spec: ClusterSpec) -> list[str]:
    """One line per instance entry whose own config changed what the command line / defaults set."""
    out, seen = [], set()
    for i in spec.instances:
        if not i.overrides or i.overrides in seen:
            continue
        seen.add(i.overrides)
        same = [j.name for j in spec.instances if j.overrides == i.overrides]
        what = ", ".join(f"{k}={v}" + (f" (was {was})" if was is not None else "") for k, v, was in i.overrides)
        out.append(f"{', '.join(same)}: {what}")
    return out


def simulate_cluster(cluster: Path, tr: Trace, out: Path, keys: dict[str, Any] | None = None,
                     clients: ClientSpec | None = None) -> None:
    """Load, run, write, print (the ``--cluster`` branch of ``kvsim simulate``). ``keys``: the
    command line's simulate options, every instance's defaults; ``clients``: closed-loop sending."""
    from rich.console import Console

    from sim.cli.cluster_table import cluster_table
    from sim.cluster.balance import balance_warnings, instance_loads
    from sim.cluster.disagg import run_cluster
    from sim.cluster.spec import load_cluster
    from sim.plots.cluster import link_utilisation, ttft_breakdown

    spec = load_cluster(cluster, keys)
    t0 = time.perf_counter()
    res = run_cluster(spec, tr, clients=clients)
    sim_s = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    res.requests.to_parquet(out / "requests.parquet", index=False)
    res.steps.to_parquet(out / "steps.parquet", index=False)
    rows = instance_loads(res.requests, res.steps, res.names, res.roles, res.end_s)
    warnings = balance_warnings(rows)
    summary = cluster_json(spec, res, sim_s, rows, warnings)
    summary["prefix_bounds"] = prefix_bounds(spec, tr)
    summary["cost_basis"] = cost_bases(spec, res)
    summary["clients"] = clients_doc(clients, tr)
    (out / "cluster.json").write_text(json.dumps(summary, indent=2, default=str))
    ttft_breakdown(res.requests, f"TTFT breakdown: {cluster.name} on {tr.path.split('/')[-1]}").savefig(
        out / "ttft_breakdown.png", dpi=120)
    if res.links:
        link_utilisation({link.name: link.busy for link in res.links.values()}, res.end_s).savefig(
            out / "link_utilisation.png", dpi=120)
    Console().print(cluster_table(cluster.name, spec, summary, rows))
    err = Console(stderr=True)
    for line in override_lines(spec):
        err.print(f"instance config overrides the command line: {line}", markup=False, highlight=False)
    for w in warnings:
        err.print(f"[yellow]warning: {w}[/yellow]")
    err.print(f"wrote {out}/requests.parquet, steps.parquet, cluster.json, plots")


def clients_doc(clients: ClientSpec | None, tr: Trace) -> dict[str, Any] | None:
    """How the requests were sent (None: open loop, at the trace's times)."""
    from workloads.schema import has_sessions

    n = clients.max_concurrency if clients is not None else None
    if n is None and not has_sessions(tr.df):
        return None
    return {"max_concurrency": n, "sessions": n is None, "steps": "exact (sim/cluster/sends.py)"}
