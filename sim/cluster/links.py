"""KV-transfer links between instances, shared fairly (processor sharing).

A link has a bandwidth (bytes/s, all its lanes together) and a latency (s). A transfer of
``S`` bytes started at ``t0`` waits the latency, then joins the link's active set; while ``n``
transfers are active each moves at ``bandwidth / n``. Alone on an idle link it ends at
``t0 + latency + S / bandwidth``; two equal transfers started together each end at
``t0 + latency + 2 S / bandwidth``. The link keeps one pending SimPy event (the next
completion) and recomputes it whenever a transfer joins or leaves.

Kinds (NVLink generations, RDMA NICs) come from ``sim/model/data/links.yaml`` with their sources;
a link between a prefill instance of TP ``p`` and a decode instance of TP ``d`` has
``min(p, d)`` lanes (each rank moves its shard over its own port or NIC).

KV bytes per block follow the decode side's layout: ``bytes_per_block`` per rank (the KV budget's,
heads divided by TP, replicated when TP exceeds the KV heads) times ``d`` ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import simpy

from sim.errors import ConfigError
from sim.safe_yaml import safe_load

EPS = 1e-12  # bytes: below this a transfer is done (float residue of the shares)


@dataclass(frozen=True, slots=True)
class LinkKind:
    key: str
    name: str
    bandwidth_gbps: float     # GB/s one way, per lane
    latency_us: float
    source: str
    latency_source: str = ""
    unverified: bool = False


@cache
def link_kinds() -> dict[str, LinkKind]:
    text = resources.files("sim.model").joinpath("data", "links.yaml").read_text()
    data = safe_load(text)
    return {k: LinkKind(key=k, **v) for k, v in data.items()}


def link_kind(name: str) -> LinkKind:
    kinds = link_kinds()
    if name not in kinds:
        raise ConfigError(f"link kind {name!r}: expected one of {', '.join(kinds)}")
    return kinds[name]


@dataclass(slots=True, eq=False)
class _Xfer:
    left: float                       # bytes still to move
    done: Callable[[float], None]     # called with the completion time


@dataclass(eq=False)
class Link:
    """One shared link (see the module docstring). ``busy`` records (time, active transfers)
    at every change, for link-utilisation plots."""

    env: simpy.Environment
    name: str
    bandwidth: float                  # bytes/s over all lanes
    latency: float                    # s
    active: list[_Xfer] = field(default_factory=list)
    busy: list[tuple[float, int]] = field(default_factory=list)
    bytes_moved: float = 0.0
    _last: float = 0.0
    _gen: int = 0

    def __post_init__(self) -> None:
        if not (self.bandwidth > 0 and math.isfinite(self.bandwidth)) or self.latency < 0:
            raise ConfigError(f"link {self.name}: bandwidth must be > 0 and latency >= 0")

    def transfer(self, nbytes: float, done: Callable[[float], None]) -> None:
        """Start moving ``nbytes`` now; ``done(t)`` is called when the last byte arrives."""
        if self.latency > 0:
            ev = self.env.timeout(self.latency)
            ev.callbacks.append(lambda _e: self._join(nbytes, done))
        else:
            self._join(nbytes, done)

    # ---- processor sharing ------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.env.now
        n = len(self.active)
        if n:
            moved = (now - self._last) * self.bandwidth / n
            for x in self.active:
                x.left -= moved
            self.bytes_moved += moved * n
        self._last = now

    def _join(self, nbytes: float, done: Callable[[float], None]) -> None:
        self._advance()
        if nbytes <= 0:
            done(self.env.now)
            return
        self.active.append(_Xfer(float(nbytes), done))
        self._reschedule()

    def _reschedule(self) -> None:
        self.busy.append((self.env.now, len(self.active)))
        self._gen += 1
        if not self.active:
            return
        gen = self._gen
        left = min(x.left for x in self.active)
        ev = self.env.timeout(max(left, 0.0) * len(self.active) / self.bandwidth)
        ev.callbacks.append(lambda _e: self._complete(gen))

    def _complete(self, gen: int) -> None:
        if gen != self._gen:
            return  # superseded: someone joined or left since
        self._advance()
        tol = EPS + 1e-9 * max((x.left for x in self.active), default=0.0)
        finished = [x for x in self.active if x.left <= tol]
        if not finished:  # rounding: the smallest is a hair above zero
            finished = [min(self.active, key=lambda x: x.left)]
        self.active = [x for x in self.active if x not in finished]
        for x in finished:
            x.done(self.env.now)
        self._reschedule()

    def utilisation(self, until: float) -> float:
        """Share of ``[0, until]`` with at least one active transfer."""
        total, prev_t, prev_n = 0.0, 0.0, 0
        for t, n in self.busy:
            if prev_n:
                total += t - prev_t
            prev_t, prev_n = t, n
        if prev_n:
            total += until - prev_t
        return total / until if until > 0 else 0.0


def make_link(env: simpy.Environment, name: str, spec: dict[str, Any], lanes: int) -> Link:
    """A link from a cluster file entry: ``kind`` (links.yaml), optionally overriding
    ``bandwidth_gbps`` (per lane) and ``latency_us``."""
    kind = link_kind(str(spec.get("kind", "rdma-ndr")))
    bw = float(spec.get("bandwidth_gbps", kind.bandwidth_gbps)) * 1e9 * max(lanes, 1)
    lat = float(spec.get("latency_us", kind.latency_us)) * 1e-6
    return Link(env, name, bw, lat)
