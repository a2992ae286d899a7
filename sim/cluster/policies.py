"""Routing policies: which replica takes a request. Plain callables ``(request, replicas,
state) -> index``; the router process that calls them is :mod:`sim.cluster.router`.

- ``round-robin``: 0, 1, 2, ... regardless of load;
- ``least-outstanding-tokens``: the replica with the fewest tokens still to process,
  divided by its ``weight`` (for mixed GPU types);
- ``prefix-affinity``: a stable hash of the prompt's first ``tokens`` tokens (default
  :data:`AFFINITY_TOKENS`) picks the replica, so requests sharing that much prefix share a
  cache; one block is not enough (every Mooncake prompt starts with the same block: issue 50
  saw all of them on one replica). When the picked replica's waiting queue is ``queue``
  (default :data:`AFFINITY_QUEUE`) requests longer than the shortest one, the request goes to
  the least-loaded replica instead (least outstanding tokens). Requests without prefix content
  go round-robin;
- ``kv-aware`` (llm-d's weighted scorers) and ``dynamo`` (NVIDIA Dynamo's KV router cost):
  :mod:`sim.cluster.scorers`, over the router's view of each cache (:mod:`sim.cluster.view`).

A policy is *static* when it never reads replica state: the fleet replay then assigns every
request up front. The others are *live*: they run at each arrival instant and read the replicas
as they are at that instant (fast-forward stays on, :mod:`sim.cluster.router`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.request import Request

if TYPE_CHECKING:
    from sim.cluster.view import PrefixView
    from sim.engine.replica import Replica


@dataclass(slots=True)
class RouterState:
    """What a policy may keep or read besides the replicas: per-replica weights, the block size,
    a counter (round-robin, tie rotation), the decision time and the router's view of caches."""

    weights: list[float]
    block_size: int
    counter: int = 0
    now: float = 0.0
    view: PrefixView | None = None


Policy = Callable[[Request, "Sequence[Replica]", RouterState], int]


def rotate_ties(values: Sequence[float], st: RouterState, *, best: str = "min") -> int:
    """Index of the best value; among equal ones, rotate with the router's counter (all idle
    replicas get turns instead of replica 0 getting everything)."""
    v = min(values) if best == "min" else max(values)
    st.counter += 1
    k = st.counter % values.count(v)  # the k-th of the ties, found by the sequence's own scans
    i = values.index(v)
    for _ in range(k):
        i = values.index(v, i + 1)
    return i


def round_robin(req: Request, reps: Sequence[Replica], st: RouterState) -> int:
    i = st.counter % len(reps)
    st.counter += 1
    return i


def least_outstanding(req: Request, reps: Sequence[Replica], st: RouterState) -> int:
    w = st.weights
    if w.count(1.0) == len(w):  # equal weights: the token counts themselves (the same order and ties)
        # idle: 0, read cheaply; a replica napping through a run whose count stays >= 1 stands
        # as 1, which is neither the least nor tied with it once some replica is at 0 or below
        v = [0 if r.idle else 1 if r.surely_busy else r.outstanding_tokens for r in reps]
        if min(v) >= 1:  # none is: the real counts
            v = [r.outstanding_tokens for r in reps]
        return rotate_ties(v, st)
    return rotate_ties([r.outstanding_tokens / w[i] for i, r in enumerate(reps)], st)


AFFINITY_TOKENS = 2048   # prompt tokens hashed: past a shared system prompt, within a conversation's history
AFFINITY_QUEUE = 4       # waiting requests beyond the shortest queue that count as a long queue


def prefix_key(req: Request, tokens: int = AFFINITY_TOKENS) -> int | None:
    """Stable 32-bit key of the request's first ``tokens`` prompt tokens (a hash-id trace: the
    hash ids that cover them), or None without content."""
    c = req.content
    if not isinstance(c, tuple) or not c:
        return None
    if c[0] == "ids":
        first = c[1][:tokens]
    elif c[0] == "hash":
        first = c[1][:max(1, -(-tokens // max(int(c[2]), 1)))]
    else:
        first = (c[1],)
    return zlib.crc32(np.asarray(first, dtype=np.int64).tobytes())


@dataclass(frozen=True, slots=True)
class PrefixAffinity:
    """The ``prefix-affinity`` policy (module docstring): a live policy, it reads the queues."""

    tokens: int = AFFINITY_TOKENS
    queue: int = AFFINITY_QUEUE

    def __call__(self, req: Request, reps: Sequence[Replica], st: RouterState) -> int:
        key = prefix_key(req, self.tokens)
        if key is None:
            return round_robin(req, reps, st)
        k = key % len(reps)
        depth = [len(r.unpulled) + r.sched.num_waiting for r in reps]
        if depth[k] >= min(depth) + max(self.queue, 1):
            return least_outstanding(req, reps, st)
        return k


prefix_affinity = PrefixAffinity()
