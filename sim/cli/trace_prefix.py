"""``kvsim trace prefix TRACE --replicas N --cache-tokens C``: how much prefix reuse a fleet
can get from a trace, without simulating (:func:`sim.cluster.whatif.fleet_prefix_bounds`).

Four rows, each the prompt tokens served from cache: the floor (no reuse), per-replica LRU
caches of ``C`` tokens behind a state-free router, one shared LRU of the fleet's ``N x C``
tokens, and an unbounded cache. A simulated fleet's hit rate (``kvsim simulate --cluster``)
falls between the floor and the shared cache; where it falls says what routing recovers.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

TraceIn = Annotated[Path, typer.Argument(help="Trace file: any format kvsim reads.")]


def register(app: typer.Typer) -> None:
    """Add ``prefix`` to the ``kvsim trace`` group."""

    @app.command("prefix")
    def prefix(
        file: TraceIn,
        cache_tokens: Annotated[int, typer.Option("--cache-tokens", min=1, help="Prefix cache per replica, in "
                                                  "tokens (a replica's KV pool: `kvsim budget` prints it).")],
        replicas: Annotated[int, typer.Option("--replicas", min=1, help="Replicas in the fleet.")] = 8,
        route: Annotated[str, typer.Option("--route", help="How the per-replica case assigns requests: "
                                           "round-robin | prefix-affinity (the router's prompt hash).")] = "round-robin",
        block_size: Annotated[int, typer.Option("--block-size", min=1, help="Tokens per KV block.")] = 16,
        format: Annotated[str | None, typer.Option("--format", help="Trace format override.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    ) -> None:
        """Prefix reuse of a trace on a fleet: floor <= per-replica LRU <= one shared LRU <= unbounded."""
        from sim.cluster.whatif import fleet_prefix_bounds
        from sim.config.schema import make_config
        from workloads.loader import load_trace

        tr = load_trace(file, format)
        b = fleet_prefix_bounds(tr, replicas, cache_tokens, make_config("flags", block_size=block_size), route)
        if as_json:
            typer.echo(json.dumps({k: {**asdict(v), "hit_rate": v.hit_rate} for k, v in
                                   (("floor", b.floor), ("per_replica", b.per_replica), ("shared", b.shared),
                                    ("unbounded", b.unbounded))}, indent=2))
            return
        typer.echo(f"{tr.path}: {tr.num_requests:,} requests, {b.floor.prompt_tokens:,} prompt tokens; "
                   f"{replicas} replicas x {cache_tokens:,} cache tokens")
        rows = (("floor (no reuse)", b.floor), (f"per-replica LRU ({route})", b.per_replica),
                (f"one shared LRU ({replicas * cache_tokens:,} tokens)", b.shared), ("unbounded", b.unbounded))
        for name, t in rows:
            typer.echo(f"  {name:<42} {100 * t.hit_rate:6.1f}%  {t.hit_tokens:>14,} hit tokens")
