"""Fleet prefix what-if: how much of the fleet's possible prefix reuse a routing policy, the
replica count, the cache size or the CPU tier recovers.

Per replica and fleet-wide: prompt tokens, hit tokens (at each request's first admission, as
vLLM counts them), hit rate and prefix-cache evictions, from a routed replay
(:func:`sim.cluster.replay.replay_fleet`) -- block for block, the engine's own caches. Two bounds:

- **ceiling**: one shared cache of the fleet's total size (every replica's usable blocks),
  LRU over prompt blocks, each request looking its prefix up at its arrival and publishing its
  prompt blocks at once. It ignores what really shrinks a cache (blocks pinned by running
  requests, output blocks, the delay until a prefix is computed) and what splits it (routing),
  so a routed fleet stays below it;
- **floor**: no reuse at all (hit tokens 0) -- what a fleet without prefix caching gets.

``recovered = (fleet - floor) / (ceiling - floor)`` is the share of the reachable hit tokens
the setup recovers. ``unbounded`` (an infinite shared cache) is reported beside the ceiling:
the reuse the trace holds at all.

Without simulating, :func:`fleet_prefix_bounds` (``kvsim trace prefix TRACE --replicas N
--cache-tokens C``) gives four numbers from the trace alone, in the same LRU model: the floor,
**per-replica** LRUs of ``C`` tokens each behind a state-free router (round-robin, or the
``prefix-affinity`` hash), **one shared LRU** of the fleet's ``N x C`` tokens, and unbounded.
Usually floor <= per-replica <= shared <= unbounded; splitting a cache can beat sharing it only
when a scan that never repeats would flush another stream's blocks from the shared one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from sim.cluster.replay import FleetResult, replay_fleet
from sim.cluster.router import RouterSpec
from sim.cluster.view import PromptKeys, leading
from sim.config.schema import SimConfig
from sim.errors import ConfigError
from sim.io.ingest import make_requests
from sim.kv.hashing import BlockHasher
from sim.request import Request
from sim.run.build import build
from sim.run.clients import open_loop_only
from workloads.schema import Trace


@dataclass(frozen=True, slots=True)
class PrefixTally:
    prompt_tokens: int
    hit_tokens: int
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(frozen=True, slots=True)
class PrefixWhatIf:
    per_replica: pd.DataFrame        # replica, requests, prompt_tokens, hit_tokens, hit_rate, evictions
    fleet: PrefixTally
    ceiling: PrefixTally             # one shared cache of the fleet's total size
    floor: PrefixTally               # no reuse
    unbounded: PrefixTally           # an infinite shared cache

    @property
    def recovered(self) -> float:
        span = self.ceiling.hit_tokens - self.floor.hit_tokens
        return (self.fleet.hit_tokens - self.floor.hit_tokens) / span if span else 1.0


def shared_cache_hits(trace: Trace, cfg: SimConfig, capacity: int | None) -> PrefixTally:
    """Hit tokens of one shared LRU cache of ``capacity`` blocks (None: unbounded), lookups and
    inserts at arrival, prompt blocks only (see the module docstring)."""
    B = cfg.block_size
    keys = PromptKeys(BlockHasher(B))
    lru: OrderedDict[int, None] = OrderedDict()
    hits = prompt = evicted = 0
    for r in make_requests(trace, cfg):
        prompt += r.prompt_tokens
        h, e = _visit(lru, keys, r, capacity)
        hits, evicted = hits + h * B, evicted + e
    return PrefixTally(prompt, hits, evicted)


def _visit(lru: OrderedDict[int, None], keys: PromptKeys, r: Request, capacity: int | None) -> tuple[int, int]:
    """One request's prompt through an LRU of ``capacity`` blocks (None: unbounded): (blocks hit
    from the left at arrival, blocks evicted inserting the prompt's)."""
    hit = leading(keys.lookup(r), lru)
    for k in keys(r):
        lru[k] = None
        lru.move_to_end(k)
    evicted = 0
    while capacity is not None and len(lru) > capacity:
        lru.popitem(last=False)
        evicted += 1
    return hit, evicted


def partitioned_hits(trace: Trace, cfg: SimConfig, replicas: int, capacity: int, route: str = "round-robin") -> PrefixTally:
    """Hit tokens of ``replicas`` separate LRU caches of ``capacity`` blocks each (the model of
    :func:`shared_cache_hits`), requests assigned by ``route``: ``round-robin`` or ``prefix-affinity``
    (the policy's prompt hash, :func:`sim.cluster.policies.prefix_key`; round-robin without content)."""
    from sim.cluster.policies import prefix_key

    if route not in ROUTES:
        raise ConfigError(f"--route {route!r}: expected one of {', '.join(ROUTES)}")
    B = cfg.block_size
    keys = PromptKeys(BlockHasher(B))
    lrus: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(replicas)]
    hits = prompt = evicted = 0
    for n, r in enumerate(make_requests(trace, cfg)):
        key = prefix_key(r) if route == "prefix-affinity" else None
        prompt += r.prompt_tokens
        h, e = _visit(lrus[(key if key is not None else n) % replicas], keys, r, capacity)
        hits, evicted = hits + h * B, evicted + e
    return PrefixTally(prompt, hits, evicted)


ROUTES = ("round-robin", "prefix-affinity")


@dataclass(frozen=True, slots=True)
class FleetBounds:
    """The trace's prefix reuse on a fleet, four ways (module docstring)."""

    floor: PrefixTally
    per_replica: PrefixTally
    shared: PrefixTally
    unbounded: PrefixTally


def fleet_prefix_bounds(trace: Trace, replicas: int, cache_tokens: int, cfg: SimConfig | None = None,
                        route: str = "round-robin") -> FleetBounds:
    """Floor, per-replica LRUs of ``cache_tokens`` each, one shared LRU of ``replicas x
    cache_tokens``, unbounded: prefix hit tokens of ``trace`` without simulating. ``cfg`` gives
    the block size, the prefix-caching switch and the arrival options (default: the defaults)."""
    from sim.config.schema import make_config

    if replicas < 1 or cache_tokens < 1:
        raise ConfigError(f"--replicas {replicas} / --cache-tokens {cache_tokens}: both must be >= 1")
    open_loop_only(trace.df, "prefix bounds", "their caches see the prompts in the trace's row order, "
                   "and a turn's prompt holds the turn before's output, which no prompt carried")
    cfg = cfg or make_config()
    blocks = max(cache_tokens // cfg.block_size, 1)
    shared = shared_cache_hits(trace, cfg, blocks * replicas)
    return FleetBounds(PrefixTally(shared.prompt_tokens, 0), partitioned_hits(trace, cfg, replicas, blocks, route),
                       shared, shared_cache_hits(trace, cfg, None))


def tally(res: FleetResult) -> tuple[pd.DataFrame, PrefixTally]:
    """Per replica and fleet-wide prefix counters of a routed replay."""
    req = res.requests.assign(hit=res.requests["prefix_hit_tokens"].clip(lower=0))
    g = req.groupby("replica")
    per = pd.DataFrame({"requests": g.size(), "prompt_tokens": g["prompt_tokens"].sum(), "hit_tokens": g["hit"].sum()})
    per = per.reindex(range(len(res.evictions)), fill_value=0)
    per["hit_rate"] = (per["hit_tokens"] / per["prompt_tokens"].where(per["prompt_tokens"] > 0)).fillna(0.0)
    per["evictions"] = list(res.evictions)
    per.index.name = "replica"
    fleet = PrefixTally(int(per["prompt_tokens"].sum()), int(per["hit_tokens"].sum()), int(sum(res.evictions)))
    return per.reset_index(), fleet


def prefix_whatif(cfgs: Sequence[SimConfig], trace: Trace, router: str | RouterSpec = "kv-aware") -> PrefixWhatIf:
    """Replay ``trace`` on the fleet ``cfgs`` behind ``router`` and set it between the bounds."""
    res = replay_fleet(cfgs, trace, router)
    per, fleet = tally(res)
    total = sum(build(c).kv.usable_blocks for c in cfgs)
    ceiling = shared_cache_hits(trace, cfgs[0], total)
    unbounded = shared_cache_hits(trace, cfgs[0], None)
    return PrefixWhatIf(per, fleet, ceiling, PrefixTally(fleet.prompt_tokens, 0), unbounded)
