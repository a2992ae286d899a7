"""The KV connector seam: KV that lives outside the GPU pool (a CPU tier, another instance).

Modelled on vLLM 0.33's KV connector API (``vllm/distributed/kv_transfer/kv_connector/v1/
base.py``, scheduler side) and the way ``v1/core/sched/scheduler.py`` drives it::

    admission of a waiting request (num_computed_tokens == 0)
        hits = kv.get_computed_blocks(req)                        local prefix hit (GPU)
        ext, async_ = connector.get_num_new_matched_tokens(req, len(hits) * B)
        kv.allocate(req, new + ext, hits)                         blocks for the hit, the load, the chunk
        connector.update_state_after_alloc(req, blocks, ext)
        async_ False: the load is a step-time term of the admitting step (plan.swap_in_blocks)
        async_ True : only the hit's and the load's blocks are taken; the request waits,
                      holding them, in WAITING_FOR_REMOTE_KVS (still in the waiting queue, passed
                      over) until get_finished() reports it received; then it is admitted as a
                      request whose first ``num_computed_tokens`` are computed
    every registration of full blocks in the prefix cache (allocator side)
        connector.save_blocks(req, start, stop)                   write-through stores (offload)
    a request finishes
        delay, params = connector.request_finished(req, blocks)   delay: its blocks stay held
        ... freed when get_finished() reports it sent

kvsim has no worker process: what vLLM's worker-side connector does (``start_load_kv``,
``save_kv_layer``, ``build_connector_meta`` to carry the step's loads and stores to it) is a
step-time term here -- a synchronous load is charged to the admitting step as swap-in blocks
(the step-cost model's PCIe term), stores are free (overlapped with compute, as vLLM's async
offload stores). A connector whose loads or frees complete *between* steps
(``asynchronous``) is polled once per scheduled step, and its engine fast-forwards in lockstep
with SimPy, one timeout per step as exact steps (:mod:`sim.engine.fastforward.lockstep`).

The first implementation is the CPU offload tier (:mod:`sim.kv.offload`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, Protocol

from sim.request import Request


class PrefixHit(NamedTuple):
    """What an admission found for a request's prefix (a typed, immutable result).

    ``blocks``: GPU prefix-cache blocks to adopt (the allocator's hit; a hybrid allocator's
    per-group hit). ``tokens``: tokens computed once the hit is adopted, the blocks' and the
    external ones. ``external_tokens``: tokens the connector continues the hit with (loaded into
    fresh blocks). ``load_async``: the load completes between steps (the request waits for it).
    """

    blocks: list[int]
    tokens: int
    external_tokens: int = 0
    load_async: bool = False

    @property
    def local_tokens(self) -> int:
        """Tokens the GPU blocks cover."""
        return self.tokens - self.external_tokens


#: PrefixHit from a tuple, without NamedTuple's Python-level ``__new__`` (admission hot path)
prefix_hit = partial(tuple.__new__, PrefixHit)


@dataclass(frozen=True, slots=True)
class ConnectorStats:
    """A connector's counters for the summary (``summary.json``: ``kv_offload``)."""

    external_blocks: int = 0           # capacity of the external tier (blocks)
    hit_tokens: int = 0                # tokens loaded for new requests
    preempted_hit_tokens: int = 0      # ... for resumed (preempted) requests
    loaded_blocks: int = 0             # external -> GPU
    stored_blocks: int = 0             # GPU -> external
    evictions: int = 0                 # external blocks evicted


class KvConnector(Protocol):
    """External KV as the scheduler and the allocator see it (see the module docstring)."""

    #: True when loads or frees complete between steps (``get_finished``): the scheduler polls
    #: the connector every step and fast-forward windows sleep through each step they apply.
    asynchronous: bool

    def get_num_new_matched_tokens(self, req: Request, num_computed_tokens: int) -> tuple[int, bool]:
        """Tokens past the local hit of ``num_computed_tokens`` the connector can supply, and
        whether they arrive asynchronously. Never more than ``num_tokens - 1`` in all."""
        ...

    def update_state_after_alloc(self, req: Request, blocks: int, num_external_tokens: int) -> None:
        """The allocation for ``req`` succeeded: it holds ``blocks`` blocks, the first
        ``num_external_tokens`` past its local hit to be loaded (0: nothing to load)."""
        ...

    def save_blocks(self, req: Request, start: int, stop: int) -> None:
        """Blocks ``start..stop`` of ``req`` were just published to the prefix cache (called by the
        allocator, in the order registrations happen)."""
        ...

    def get_finished(self, now: float) -> tuple[set[int], set[int]]:
        """(uids whose delayed free may happen now, uids whose asynchronous load has arrived)."""
        ...

    def next_finished_s(self) -> float | None:
        """When the earliest pending transfer completes (None: none pending, or unknown). An
        engine with nothing to schedule but requests waiting for a load sleeps until then."""
        ...

    def request_finished(self, req: Request, blocks: int) -> tuple[bool, dict[str, Any] | None]:
        """``req`` finished holding ``blocks`` blocks: (free them later, on ``get_finished``?
        transfer parameters for the request's output)."""
        ...

    def stats(self) -> ConnectorStats: ...

    def check(self) -> None:
        """Raise AssertionError if the connector's state is inconsistent."""
        ...
