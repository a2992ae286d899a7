"""The tables `kvsim simulate --cluster` prints: the fleet's summary (units on every time, the
load verdict, the prefix hit rate) and one row per instance (:mod:`sim.cluster.balance`)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from sim.cli.headline import headline_rows
from sim.cluster.balance import InstanceLoad
from sim.cluster.spec import ClusterSpec
from sim.io import fmt
from sim.io.overload import Load


def _fleet(name: str, spec: ClusterSpec, s: dict[str, Any]) -> Table:
    t = Table(title=f"kvsim cluster: {name} | {len(spec.instances)} instances | router {spec.router.policy}"
                    + (f" | {spec.flow}" if spec.disaggregated else ""))
    t.add_column("metric")
    t.add_column("value", justify="right")
    span = s["simulated_s"]
    lat = {m: (s[f"{m.lower()}_p50_s"], s[f"{m.lower()}_p90_s"], s[f"{m.lower()}_p99_s"]) for m in ("TTFT", "TPOT", "E2E")}
    for row in headline_rows(s["finished"], s["rejected"], span, s["finished"] / span if span else 0.0,
                             s["output_tokens"] / span if span else 0.0, Load(**s["load"]), lat):
        t.add_row(*row)
    b = s.get("prefix_bounds")
    t.add_row("prefix cache hit rate", f"{100 * s['prefix_hit_rate']:.1f}%" + (
        "" if not b else f" (the trace allows: {100 * b['per_replica']:.1f}% with per-replica LRUs under round-robin, "
        f"{100 * b['shared']:.1f}% with one shared LRU of the fleet's size, {100 * b['unbounded']:.1f}% unbounded)"))
    if spec.disaggregated:
        t.add_row("KV transfer p99 / decode KV wait p99", fmt.durations((s["transfer_p99_s"], s["kv_wait_p99_s"])))
        t.add_row("pulls that waited for decode KV blocks", f"{s['decode_kv_blocked']:,}")
    for c in s.get("cost_basis", []):
        t.add_row(f"step-time basis ({c['instances']})", f"{c['basis']}: {c['cost_model']}")
    for link in s["links"]:
        t.add_row(f"link {link['name']} ({link['kind']}{', unverified' if link['unverified'] else ''})",
                  f"{100 * link['utilisation']:.1f}% busy")
    return t


def _instances(rows: list[InstanceLoad]) -> Table:
    t = Table(title="per instance: requests (prefill: prefills), share of an even split, busy time, KV held, "
                    "prefix hits, preemptions, queue peak, load verdict (bursts: overloaded during bursts)")
    for c in ("name", "role", "reqs", "share", "busy", "KV", "hit", "preempt", "queue", "load"):
        t.add_column(c, justify="left" if c in ("name", "role", "load") else "right", no_wrap=True)
    for r in rows:
        verdict = "-" if r.load.offered_rps is None else "OVERLOADED" if r.load.overloaded else \
            "bursts" if r.load.overloaded_in_bursts else "keeps up"
        t.add_row(r.name, r.role, f"{r.requests:,}", f"{100 * r.fair_share:.0f}%", f"{100 * r.busy:.0f}%",
                  f"{100 * r.kv_use:.0f}%", "-" if r.hit_rate is None else f"{100 * r.hit_rate:.1f}%",
                  f"{r.preemptions:,}", f"{r.load.queue_peak:,}",
                  f"[bold red]{verdict}[/]" if r.load.flagged else verdict)
    return t


def cluster_table(name: str, spec: ClusterSpec, summary: dict[str, Any], rows: list[InstanceLoad]) -> Group:
    return Group(_fleet(name, spec, summary), _instances(rows))
