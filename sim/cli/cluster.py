"""`kvsim simulate --cluster FILE.yaml TRACE --out DIR`: a cluster of unified or prefill/decode
instances behind a router (:mod:`sim.cluster.spec`).

Writes ``requests.parquet`` (request columns + ``instance``, ``prefill_instance``,
``prefill_done_s``, ``transfer_s``, ``kv_wait_s``), ``steps.parquet`` (every instance's steps +
``instance``), ``cluster.json`` (instances, links and their utilisation, decode-side waits) and
two plots: ``ttft_breakdown.png`` and, with transfers, ``link_utilisation.png``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sim.cluster.disagg import ClusterResult, run_cluster
from sim.cluster.links import link_kind
from sim.cluster.spec import ClusterSpec, load_cluster
from workloads import load_trace


def cluster_json(spec: ClusterSpec, res: ClusterResult, sim_s: float) -> dict[str, Any]:
    req = res.requests
    inst = []
    for k, i in enumerate(spec.instances):
        mine = req[req["instance"] == k]
        inst.append({"name": i.name, "role": i.role, "model": i.config.model, "gpu": i.config.gpu,
                     "tensor_parallel_size": i.config.tensor_parallel_size,
                     "requests": len(mine), "prefills": int((req["prefill_instance"] == k).sum()),
                     "busy_s": float(res.steps.loc[res.steps["instance"] == k, "duration_s"].sum())})
    links = []
    for (p, d), link in res.links.items():
        kind = link_kind(str(spec.link_spec(spec.instances[p].name, spec.instances[d].name).get("kind", "rdma-ndr")))
        links.append({"name": link.name, "kind": kind.key, "bandwidth_bytes_per_s": link.bandwidth,
                      "latency_s": link.latency, "bytes_moved": link.bytes_moved,
                      "utilisation": link.utilisation(res.end_s), "source": kind.source, "unverified": kind.unverified})
    fin = req[req["status"] == "finished"]
    return {"instances": inst, "links": links, "router": spec.router.policy, "flow": spec.flow,
            "threshold": spec.threshold, "requests": len(req), "finished": len(fin),
            "rejected": int((req["status"] == "rejected").sum()),
            "decode_kv_blocked": res.decode_kv_blocked,
            "ttft_p50_s": float(fin["ttft_s"].quantile(0.5)) if len(fin) else None,
            "ttft_p99_s": float(fin["ttft_s"].quantile(0.99)) if len(fin) else None,
            "tpot_p99_s": float(fin["tpot_s"].quantile(0.99)) if len(fin) else None,
            "transfer_p99_s": float(fin["transfer_s"].quantile(0.99)) if fin["transfer_s"].notna().any() else None,
            "kv_wait_p99_s": float(fin["kv_wait_s"].quantile(0.99)) if fin["kv_wait_s"].notna().any() else None,
            "simulated_s": res.end_s, "sim_wall_s": round(sim_s, 4)}


def simulate_cluster(cluster: Path, trace: Path, out: Path, fmt: str | None = None, skip_bad: bool = False) -> None:
    """Load, run, write, print (the ``--cluster`` branch of ``kvsim simulate``)."""
    from sim.plots.cluster import link_utilisation, ttft_breakdown

    spec = load_cluster(cluster)
    tr = load_trace(trace, fmt=fmt, skip_bad=skip_bad)
    t0 = time.perf_counter()
    res = run_cluster(spec, tr)
    sim_s = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    res.requests.to_parquet(out / "requests.parquet", index=False)
    res.steps.to_parquet(out / "steps.parquet", index=False)
    summary = cluster_json(spec, res, sim_s)
    (out / "cluster.json").write_text(json.dumps(summary, indent=2))
    ttft_breakdown(res.requests, f"TTFT breakdown: {cluster.name} on {tr.path.split('/')[-1]}").savefig(
        out / "ttft_breakdown.png", dpi=120)
    if res.links:
        link_utilisation({link.name: link.busy for link in res.links.values()}, res.end_s).savefig(
            out / "link_utilisation.png", dpi=120)
    t = Table(title=f"kvsim cluster: {cluster.name} | {len(spec.instances)} instances | router {spec.router.policy}"
                    + (f" | {spec.flow}" if spec.disaggregated else ""))
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k in ("requests", "finished", "rejected", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "transfer_p99_s",
              "kv_wait_p99_s", "decode_kv_blocked"):
        v = summary[k]
        t.add_row(k, "-" if v is None else f"{v:.4g}" if isinstance(v, float) else f"{v:,}")
    for link in summary["links"]:
        t.add_row(f"link {link['name']} ({link['kind']}{', unverified' if link['unverified'] else ''})",
                  f"{100 * link['utilisation']:.1f}% busy")
    Console().print(t)
    Console(stderr=True).print(f"wrote {out}/requests.parquet, steps.parquet, cluster.json, plots")
