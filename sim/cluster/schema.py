"""The cluster file's schema: every key, its default and what it means, stated once.

The parser (:mod:`sim.cluster.spec`) takes its defaults from these tables and
``kvsim simulate --cluster-help`` prints them (:func:`schema_text`), so the two cannot drift.
Router option defaults are read from the router's own tables (:mod:`sim.cluster.router`,
:mod:`sim.cluster.scorers`), for the same reason.

Precedence of an instance's simulate options, lowest first: the file's ``defaults``, then the
command line (flags, ``--config``, a pasted ``vllm serve`` line), then the instance's own
``config`` (listed as overrides in the run's output).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    default: Any
    help: str


TOP: tuple[Key, ...] = (
    Key("router", "least-outstanding-tokens", "the unified / decode pool's router: NAME[:key=value,...] (below)"),
    Key("prefill_router", "least-outstanding-tokens", "the prefill pool's router (P/D only)"),
    Key("flow", "decode-first", "P/D: decode-first (llm-d: pick D, then P) | prefill-first (vLLM's proxy)"),
    Key("threshold", 0, "P/D, llm-d's pd threshold: uncached prompt tokens below it are prefilled on D"),
    Key("defaults", {}, "simulate options every instance starts from (the --config keys)"),
    Key("instances", None, "a list of instance entries (below)"),
    Key("links", {}, "KV-transfer links: {default: LINK, pairs: [LINK + between: [A, B]]}"),
)
INSTANCE: tuple[Key, ...] = (
    Key("name", "the role", "instances of an entry are NAME0, NAME1, ... (just NAME when count is 1)"),
    Key("role", "unified", "unified (prefill and decode) | prefill | decode"),
    Key("count", 1, "how many identical instances"),
    Key("config", {}, "simulate options of these instances, over defaults and the command line"),
)
LINK: tuple[Key, ...] = (
    Key("kind", "rdma-ndr", "a link kind of sim/model/data/links.yaml"),
    Key("bandwidth_gbps", "the kind's", "GB/s one way per lane (lanes: min of the two TPs)"),
    Key("latency_us", "the kind's", "per transfer, before the bytes flow"),
    Key("between", None, "pairs only: the two instance names"),
)
#: simulate options about the cluster's arrivals: the same for every instance, so an instance's
#: own ``config`` may not set them (``defaults`` and the command line may)
ARRIVAL_KEYS = ("rate_scale", "total_rate", "arrival_jitter")
ROLES = ("unified", "prefill", "decode")
FLOWS = ("decode-first", "prefill-first")


def keys(table: tuple[Key, ...]) -> set[str]:
    return {k.name for k in table}


def default(table: tuple[Key, ...], name: str) -> Any:
    """The default of ``name`` in ``table`` (the parser's only source of defaults)."""
    return next(k.default for k in table if k.name == name)


def _rows(title: str, table: tuple[Key, ...]) -> list[str]:
    out = [title]
    for k in table:
        d = "required" if k.default is None else f"default: {k.default}"
        out.append(f"  {k.name:<15} {d:<36} {k.help}")
    return out


def router_lines() -> list[str]:
    """The routers and their options with defaults (read from the router's tables)."""
    from sim.cluster.router import POLICIES, RouterSpec
    from sim.cluster.scorers import LLMD_WEIGHTS
    from sim.cluster.view import VIEWS

    r = RouterSpec()
    w = ",".join(f"{k}={v:g}" for k, v in LLMD_WEIGHTS.items())
    return ["routers (router:, prefill_router:, --router): " + " | ".join(POLICIES),
            f"  kv-aware[:{w},view={r.view},delay={r.delay_s:g}]",
            "    llm-d's weighted scorers (sim/cluster/scorers.py): prefix = hit blocks / prompt blocks,",
            "    queue = fewest waiting, kv = 1 - KV usage, load = fewest outstanding tokens;",
            f"    view: {' | '.join(VIEWS)}; delay: seconds the router's view of each cache lags",
            f"  dynamo[:overlap={r.overlap_weight:g},view={r.view},delay={r.delay_s:g}]   Dynamo's KV cost",
            f"  prefix-affinity[:tokens={r.affinity_tokens},queue={r.affinity_queue}]   a hash of the prompt's "
            "first `tokens` tokens picks the replica;",
            "    the least-loaded one instead when its waiting queue is `queue` requests longer than the shortest",
            "  round-robin, least-outstanding-tokens   no options"]


def schema_text() -> str:
    """The whole schema, for ``--cluster-help``."""
    lines = ["cluster file (kvsim simulate --cluster FILE.yaml): every key and its default", ""]
    lines += [*_rows("top level:", TOP), "", *_rows("instances[]:", INSTANCE), ""]
    lines += [*_rows("links.default, links.pairs[]:", LINK), "", *router_lines(), ""]
    lines += ["simulate options of an instance, lowest precedence first: defaults:, then the command line",
              "(flags, --config, a pasted `vllm serve` line), then the instance's config: (listed as overrides).",
              f"Arrival options ({', '.join(ARRIVAL_KEYS)}) apply to the whole cluster: not per instance."]
    return "\n".join(lines)
