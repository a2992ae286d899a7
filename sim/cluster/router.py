"""The router: a SimPy process that hands each arrival to the replica a policy picks.

::

    trace --> Router --(policy, view)--> Replica 0 (scheduler + KV + cost)
                                     \\-> Replica 1
                                      \\> ...

A router spec names a policy (:mod:`sim.cluster.policies`, :mod:`sim.cluster.scorers`) and its
options, ``name[:key=value,...]``::

    round-robin | least-outstanding-tokens | prefix-affinity[:tokens=2048,queue=4]
    kv-aware[:prefix=3,queue=2,kv=2,load=0,view=precise|approximate,delay=SECONDS]
    dynamo[:overlap=1,view=precise|approximate,delay=SECONDS]

**Live routing keeps fast-forward.** The router wakes at each arrival instant ``t`` with an
*urgent* SimPy event, so it acts before any replica event at ``t`` (a step ending exactly at
``t`` has not landed yet: the router sees the replica as it is at ``t``, left limit). A
replica's fast-forward window never completes a step that ends at or after the router's next
arrival unseen: it waits there, in the state the exact loop would be in at ``t`` (its
decoders' counts made real, or their sum corrected), on the router's :meth:`Router.routed`
event, and goes on once the router has routed (:mod:`sim.engine.fastforward.pause`). For a
router that reads only outstanding tokens (``RouterSpec.reads_only_totals``) a run of quiet
steps does not even wait: it answers the read from its laid-out step ends and sleeps until a
request is routed to it (lazy reads). The decisions -- hence all outputs -- are bit-identical
to ``--exact-steps`` (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from sim.cluster.policies import (
    AFFINITY_QUEUE,
    AFFINITY_TOKENS,
    Policy,
    PrefixAffinity,
    RouterState,
    least_outstanding,
    round_robin,
)
from sim.cluster.scorers import LLMD_WEIGHTS, SCORERS, DynamoCost, WeightedScorers
from sim.cluster.view import VIEWS
from sim.engine.replica import Replica
from sim.engine.sleep import sleep_until
from sim.errors import ConfigError
from sim.request import Request

POLICIES = ("round-robin", "least-outstanding-tokens", "prefix-affinity", "kv-aware", "dynamo")
STATIC = ("round-robin",)  # state-free: can be assigned up front


@dataclass(frozen=True, slots=True)
class RouterSpec:
    policy: str = "least-outstanding-tokens"
    weights: tuple[tuple[str, float], ...] = tuple(LLMD_WEIGHTS.items())  # kv-aware
    view: str = "precise"          # kv-aware / dynamo: the router's view of each cache
    delay_s: float = 0.0           # staleness of that view
    overlap_weight: float = 1.0    # dynamo: --kv-overlap-score-weight
    affinity_tokens: int = AFFINITY_TOKENS   # prefix-affinity: prompt tokens hashed
    affinity_queue: int = AFFINITY_QUEUE     # prefix-affinity: a queue this much longer falls back to load

    @property
    def static(self) -> bool:
        return self.policy in STATIC

    @property
    def reads_request_counts(self) -> bool:
        """Reads requests' token counts (Dynamo's active blocks), not only replica totals."""
        return self.policy == "dynamo"

    @property
    def reads_only_totals(self) -> bool:
        """Reads nothing of a replica but its outstanding tokens (lazy reads: sim/engine/fastforward/pause.py)."""
        return self.policy == "least-outstanding-tokens"

    @property
    def uses_view(self) -> bool:
        return self.policy in ("kv-aware", "dynamo") and (
            self.policy == "dynamo" or dict(self.weights).get("prefix", 0.0) > 0)

    def make(self) -> Policy:
        if self.policy == "kv-aware":
            return WeightedScorers(self.weights)
        if self.policy == "dynamo":
            return DynamoCost(self.overlap_weight)
        if self.policy == "prefix-affinity":
            return PrefixAffinity(self.affinity_tokens, self.affinity_queue)
        return {"round-robin": round_robin, "least-outstanding-tokens": least_outstanding}[self.policy]


def parse_router(text: str | RouterSpec) -> RouterSpec:
    """``name[:key=value,...]`` -> :class:`RouterSpec`; a bad spec is a one-line ConfigError."""
    if isinstance(text, RouterSpec):
        return text
    name, _, opts = text.partition(":")
    if name not in POLICIES:
        raise ConfigError(f"--router {text!r}: expected one of {', '.join(POLICIES)}")
    weights = dict(LLMD_WEIGHTS)
    kw: dict[str, Any] = {}
    for item in filter(None, opts.split(",")):
        key, eq, val = item.partition("=")
        key = key.strip()
        allowed = (*SCORERS, "view", "delay") if name == "kv-aware" else ("overlap", "view", "delay") \
            if name == "dynamo" else ("tokens", "queue") if name == "prefix-affinity" else ()
        if not eq or key not in allowed:
            raise ConfigError(f"--router {text!r}: unknown option {key!r}"
                              + (f" (valid: {', '.join(allowed)})" if allowed else f" ({name} takes none)"))
        if key == "view":
            if val not in VIEWS:
                raise ConfigError(f"--router {text!r}: view {val!r}: expected one of {', '.join(VIEWS)}")
            kw["view"] = val
            continue
        try:
            num = float(val)
        except ValueError:
            raise ConfigError(f"--router {text!r}: {key}={val!r} is not a number") from None
        if not (math.isfinite(num) and num >= 0):
            raise ConfigError(f"--router {text!r}: {key}={val!r} must be >= 0")
        if name == "prefix-affinity":
            if num != int(num) or (key == "tokens" and num < 1):
                raise ConfigError(f"--router {text!r}: {key}={val!r} must be a whole number" + (" >= 1" if key == "tokens" else ""))
            kw[f"affinity_{key}"] = int(num)
        elif key == "delay":
            kw["delay_s"] = num
        elif key == "overlap":
            kw["overlap_weight"] = num
        else:
            weights[key] = num
    return RouterSpec(name, tuple(weights.items()), **kw)


def policy(name: str) -> Policy:
    return parse_router(name).make()


class Router:
    """Routes ``reqs`` (arrival order) live: each one at its arrival instant."""

    def __init__(self, env: simpy.Environment, reps: Sequence[Replica], reqs: list[Request],
                 choose: Policy, state: RouterState, active: Callable[[float], int] | None = None) -> None:
        self.env, self.reps, self.reqs, self.choose, self.state = env, reps, reqs, choose, state
        self.active = active
        self.assigned = np.full(len(reqs), -1, dtype=np.int64)
        self._next = 0
        self._routed = env.event()
        env.process(self._run())

    def next_arrival(self) -> float:
        return self.reqs[self._next].arrival_s if self._next < len(self.reqs) else math.inf

    def routed(self) -> simpy.Event:
        """Fires once the arrivals of the router's next arrival instant are routed (replica
        windows waiting for the router resume on it: one event per instant, not per replica)."""
        return self._routed

    def _release(self) -> None:
        if self._routed.callbacks:
            self._routed.succeed()
            self._routed = self.env.event()

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env, st, view = self.env, self.state, self.state.view
        for i, r in enumerate(self.reqs):
            if r.arrival_s > env.now:
                self._release()  # every arrival of the last instant is routed
                yield from sleep_until(env, r.arrival_s, urgent=True)
            self._next = i + 1
            st.now = env.now
            k = self.choose(r, self.reps if self.active is None else
                            self.reps[:max(1, min(self.active(env.now), len(self.reps)))], st)
            if view is not None:
                view.routed(r, self.reps[k], env.now)
            self.assigned[r.uid] = k
            self.reps[k].submit(r)
        self._release()


def assign_static(reqs: list[Request], reps: Sequence[Replica], choose: Policy, state: RouterState,
                  active: Callable[[float], int] | None) -> np.ndarray:
    """Route a state-free policy up front: each replica then replays its own inbox."""
    assigned = np.empty(len(reqs), dtype=np.int64)
    for r in reqs:
        n = len(reps) if active is None else max(1, min(active(r.arrival_s), len(reps)))
        k = 0 if n == 1 else choose(r, reps[:n], state)
        assigned[r.uid] = k
        reps[k].submit(r)
    return assigned

