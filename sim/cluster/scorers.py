"""KV-aware routing: llm-d's weighted scorers and NVIDIA Dynamo's KV router cost.

**llm-d** (inference scheduler / endpoint picker: filter -> score -> pick). Each scorer gives
every candidate a score in [0, 1]; the picker takes the highest weighted sum (ties rotate):

    prefix   hit blocks / prompt blocks, as the router's view sees them   (prefix-cache-scorer)
    queue    (max_q - q) / (max_q - min_q) over candidates, 1 if all equal (queue-scorer)
    kv       1 - KV-cache usage (used blocks / usable blocks)             (kv-cache-utilization-scorer)
    load     as queue, on outstanding tokens (kvsim's; llm-d has no such scorer)

Default weights ``prefix=3, queue=2, kv=2`` are llm-d's inference-scheduling profile: the
``default`` scheduling profile of llm-d/llm-d ``guides/inference-scheduling/scheduler/
inference-scheduling.values.yaml`` (queue-scorer 2, kv-cache-utilization-scorer 2,
prefix-cache-scorer 3); Red Hat OpenShift AI 3.4 documents the same queue 2 / prefix 3 balance
("Configuring scheduler settings for LLM inference services"). ``load`` defaults to 0.

The load terms matter: vLLM admits a request at once while it has room, so its waiting queue
(``queue``) stays empty until a replica is full, and prefix scores alone pull every request
with a shared first block to the replicas that already hold it. Without ``kv`` the old default
(``prefix=3, queue=2``) left 3 of 8 replicas with no request at all on the bundled Mooncake slice
(issue 50); with ``kv=2`` every replica gets at least 11 % of them and the fleet's hit rate
still beats round-robin's (tests/test_router_default.py).

**Dynamo** (``--router-mode kv``, router design doc): per worker,
``cost = overlap_weight x potential_prefill_blocks + potential_active_blocks``, lowest wins,
with ``potential_prefill_blocks = (prompt tokens - overlap blocks x block size) / block size``
and ``potential_active_blocks`` the blocks the worker's unfinished requests hold or will hold
plus the new request's. ``overlap_weight`` is ``--kv-overlap-score-weight`` (default 1.0);
``--router-temperature`` 0 (deterministic) is what kvsim models.

Signals are read at the arrival instant; queue depth counts requests submitted but not yet
taken in by the replica's loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.cluster.policies import RouterState, rotate_ties
from sim.request import Request

if TYPE_CHECKING:
    from sim.engine.replica import Replica

SCORERS = ("prefix", "queue", "kv", "load")
LLMD_WEIGHTS = {"prefix": 3.0, "queue": 2.0, "kv": 2.0, "load": 0.0}


def queue_depth(rep: Replica) -> int:
    return len(rep.unpulled) + rep.sched.num_waiting


def kv_usage(rep: Replica) -> float:
    kv = rep.kv
    return 1.0 - kv.num_free_blocks / kv.usable_blocks if kv.usable_blocks else 1.0


def active_blocks(rep: Replica, block_size: int) -> int:
    """Blocks the replica's unfinished requests hold or will hold (their tokens so far)."""
    B = block_size
    s = rep.sched
    return sum(-(-r.num_tokens // B) for reqs in (rep.unpulled, s.running, s.waiting_requests()) for r in reqs)


def _inverse_minmax(values: Sequence[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi == lo:
        return [1.0] * len(values)
    return [(hi - v) / (hi - lo) for v in values]


def prefix_scores(req: Request, reps: Sequence[Replica], st: RouterState) -> list[float]:
    view = st.view
    if view is None:
        return [0.0] * len(reps)
    n = view.prompt_blocks(req)
    if not n:
        return [0.0] * len(reps)
    return [view.hits(req, r, st.now) / n for r in reps]


def queue_scores(req: Request, reps: Sequence[Replica], st: RouterState) -> list[float]:
    return _inverse_minmax([queue_depth(r) for r in reps])


def kv_scores(req: Request, reps: Sequence[Replica], st: RouterState) -> list[float]:
    return [1.0 - kv_usage(r) for r in reps]


def load_scores(req: Request, reps: Sequence[Replica], st: RouterState) -> list[float]:
    return _inverse_minmax([r.outstanding_tokens / st.weights[i] for i, r in enumerate(reps)])


SCORE_FUNCS = {"prefix": prefix_scores, "queue": queue_scores, "kv": kv_scores, "load": load_scores}


@dataclass(frozen=True, slots=True)
class WeightedScorers:
    """llm-d's scorer chain: a policy ``(request, replicas, state) -> index``."""

    weights: tuple[tuple[str, float], ...]

    def scores(self, req: Request, reps: Sequence[Replica], st: RouterState) -> list[float]:
        total = [0.0] * len(reps)
        for name, w in self.weights:
            if w:
                for i, v in enumerate(SCORE_FUNCS[name](req, reps, st)):
                    total[i] += w * v
        return total

    def __call__(self, req: Request, reps: Sequence[Replica], st: RouterState) -> int:
        return rotate_ties(self.scores(req, reps, st), st, best="max")


@dataclass(frozen=True, slots=True)
class DynamoCost:
    """Dynamo's KV router: overlap blocks weighed against active blocks (lowest cost wins)."""

    overlap_weight: float = 1.0

    def costs(self, req: Request, reps: Sequence[Replica], st: RouterState) -> list[float]:
        B = st.block_size
        new = -(-req.prompt_tokens // B)
        out = []
        for r in reps:
            hit = st.view.hits(req, r, st.now) if st.view is not None else 0
            prefill = (req.prompt_tokens - hit * B) / B
            out.append(self.overlap_weight * prefill + active_blocks(r, B) + new)
        return out

    def __call__(self, req: Request, reps: Sequence[Replica], st: RouterState) -> int:
        return rotate_ties(self.costs(req, reps, st), st)
