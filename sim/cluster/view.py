"""The router's view of each replica's prefix cache: which of a request's prompt blocks it
believes a replica holds. Two kinds, as in llm-d and NVIDIA Dynamo:

- **precise** (llm-d ``precise-prefix-cache-scorer``, Dynamo with ``--kv-events``): built from
  the replicas' KV events -- *block stored* when a full block gets its hash, *block removed*
  when allocation evicts it. With ``delay_s = 0`` the router sees the cache exactly as it is
  at the arrival instant; with a delay it sees the events up to ``now - delay_s`` (events in
  flight, a scrape interval).
- **approximate** (llm-d's default prefix scorer, Dynamo ``--no-kv-events``): built from the
  router's own routing history -- the prompt blocks of every request it sent to a replica,
  in an LRU of that replica's capacity in blocks -- with the same optional delay. It does
  not see evictions, nor blocks a replica computed that the router did not predict.

Block identity is content: the view hashes a request's prompt blocks with the fleet's one
:class:`~sim.kv.hashing.BlockHasher` (installed in every replica's allocator by
:mod:`sim.cluster.events`, so keys are comparable across replicas); only blocks with prompt
content can be shared. Views are read by the scorers in :mod:`sim.cluster.scorers`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from sim.cluster.events import KvEventLog, install
from sim.kv.block_table import BlockTable
from sim.kv.hashing import BlockHasher, shared_prefix_blocks
from sim.request import Request

if TYPE_CHECKING:
    from sim.engine.replica import Replica


class PrefixView(Protocol):
    def prompt_blocks(self, req: Request) -> int:
        """Shareable full prompt blocks of ``req`` (the most it could hit)."""
        ...

    def hits(self, req: Request, rep: Replica, now: float) -> int:
        """Leading prompt blocks of ``req`` the router believes ``rep`` holds at ``now``."""
        ...

    def routed(self, req: Request, rep: Replica, now: float) -> None:
        """``req`` was sent to ``rep`` at ``now`` (the approximate view learns from it)."""
        ...


class PromptKeys:
    """A request's shareable prompt-block keys (all its full prompt blocks with content, as the
    engine registers them), computed once per request with the fleet's hasher."""

    def __init__(self, hasher: BlockHasher) -> None:
        self.hasher = hasher
        self._uid = -1
        self._keys: list[int] = []

    def __call__(self, req: Request) -> list[int]:
        if req.uid != self._uid:
            B = self.hasher.block_size
            table = BlockTable()  # scratch: never the request's own handle
            self.hasher.extend(req, table.hashes, shared_prefix_blocks(req, B))
            self._keys = table.hashes
            self._uid = req.uid
        return self._keys

    def lookup(self, req: Request) -> list[int]:
        """The keys a prefix lookup may hit: capped one token short of the prompt (vLLM)."""
        return self(req)[:max((req.prompt_tokens - 1) // self.hasher.block_size, 0)]


def leading(keys: Sequence[int], held: object) -> int:
    """How many of ``keys``, from the first, are in ``held`` (a prefix hit stops at a miss)."""
    n = 0
    for k in keys:
        if k not in held:  # type: ignore[operator]
            break
        n += 1
    return n


class PreciseView:
    """From KV events (see the module docstring); ``delay_s`` makes it stale."""

    def __init__(self, reps: Sequence[Replica], block_size: int, delay_s: float = 0.0,
                 hasher: BlockHasher | None = None) -> None:
        self.keys = PromptKeys(hasher or BlockHasher(block_size))
        self.delay_s = delay_s
        self._index = {id(r): i for i, r in enumerate(reps)}
        self._logs: list[KvEventLog | None] = [install(r, self.keys.hasher, record=delay_s > 0) for r in reps]
        self._seen: list[set[int]] = [set() for _ in reps]
        self._applied = [0] * len(reps)

    def prompt_blocks(self, req: Request) -> int:
        return len(self.keys.lookup(req))

    def held(self, rep: Replica, now: float) -> object:
        """The keys the router sees for ``rep`` at ``now`` (a live mapping when not stale)."""
        i = self._index[id(rep)]
        log = self._logs[i]
        if log is None:
            return ()
        if not self.delay_s:
            return log.live
        seen, events, j = self._seen[i], log.events, self._applied[i]
        upto = now - self.delay_s
        while j < len(events) and events[j][0] <= upto:
            _, key, stored = events[j]
            if stored:
                seen.add(key)
            else:
                seen.discard(key)
            j += 1
        self._applied[i] = j
        return seen

    def hits(self, req: Request, rep: Replica, now: float) -> int:
        return leading(self.keys.lookup(req), self.held(rep, now))

    def routed(self, req: Request, rep: Replica, now: float) -> None:
        return None


class ApproximateView:
    """From the router's own history: an LRU of ``capacity`` blocks per replica (default: the
    replica's KV pool); a routed request's prompt blocks enter it ``delay_s`` later."""

    def __init__(self, reps: Sequence[Replica], block_size: int, delay_s: float = 0.0,
                 capacity: int | None = None, hasher: BlockHasher | None = None) -> None:
        self.keys = PromptKeys(hasher or BlockHasher(block_size))
        self.delay_s = delay_s
        self._index = {id(r): i for i, r in enumerate(reps)}
        self._cap = [capacity or r.kv.usable_blocks for r in reps]
        self._lru: list[OrderedDict[int, None]] = [OrderedDict() for _ in reps]
        self._due: list[deque[tuple[float, list[int]]]] = [deque() for _ in reps]

    def prompt_blocks(self, req: Request) -> int:
        return len(self.keys.lookup(req))

    def held(self, rep: Replica, now: float) -> OrderedDict[int, None]:
        i = self._index[id(rep)]
        lru, due = self._lru[i], self._due[i]
        while due and due[0][0] <= now:
            for k in due.popleft()[1]:
                lru[k] = None
                lru.move_to_end(k)
            while len(lru) > self._cap[i]:
                lru.popitem(last=False)
        return lru

    def hits(self, req: Request, rep: Replica, now: float) -> int:
        return leading(self.keys.lookup(req), self.held(rep, now))

    def routed(self, req: Request, rep: Replica, now: float) -> None:
        self._due[self._index[id(rep)]].append((now + self.delay_s, list(self.keys(req))))
        self.held(rep, now)


VIEWS = ("precise", "approximate")


def make_view(kind: str, reps: Sequence[Replica], block_size: int, delay_s: float = 0.0,
              hasher: BlockHasher | None = None) -> PrefixView:
    """The view ``kind`` of ``reps``' caches; ``hasher``: the fleet's one (else its own)."""
    if kind == "precise":
        return PreciseView(reps, block_size, delay_s, hasher)
    return ApproximateView(reps, block_size, delay_s, hasher=hasher)
