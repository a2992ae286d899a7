"""The CPU offload tier as a KV connector (``--kv-offloading-size``, vLLM 0.33's native backend).

vLLM's ``OffloadingConnector`` (followed: ``vllm/distributed/kv_transfer/kv_connector/v1/
offloading/scheduler.py``, ``OffloadingConnectorScheduler``) is *write-through*: every block a
request fills is stored to the CPU tier (:class:`~sim.kv.cpu_tier.CpuTier`) in the step that
computes it, whether or not the GPU copy is ever evicted. A request's prefix is looked up on the
GPU first (the allocator's hit); the CPU tier continues the hit from the first GPU miss and those
blocks are loaded back into fresh GPU blocks::

    prompt blocks     0     1     2     3     4     5
    GPU prefix cache  hit   hit   miss                      -> 2 GPU hits (allocator)
    CPU tier                      hit   hit   miss          -> 2 loads: 32 external tokens (B 16)

Per admission: ``get_num_new_matched_tokens`` touches all the request's full blocks, then looks
up from the GPU hit (nothing if less than a block remains); after a successful allocation with a
load the request's next block to offer is the first one past the hit
(``update_state_after_alloc``); every registration offers the newly filled blocks
(``_get_reqs_to_store``) and, if any was stored, touches the request's blocks. kvsim does these
at schedule time, request by request, instead of once after the step is scheduled; loads are
synchronous and charged to the admitting step (README "Fidelity"). Any allocator with prefix
caching serves: the connector asks it only for content keys (``block_keys``) and hears of
registrations through ``save_blocks``.
"""

from __future__ import annotations

from typing import Any

from sim.kv.base import KvAllocator
from sim.kv.connector import ConnectorStats
from sim.kv.cpu_tier import CpuTier
from sim.request import Request, Status


class OffloadConnector:
    """A CPU LRU of offloaded blocks behind ``kv``'s prefix cache (implements ``KvConnector``)."""

    asynchronous = False  # loads complete within the admitting step

    def __init__(self, kv: KvAllocator, cpu_blocks: int) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        self.cpu = CpuTier(cpu_blocks)
        self.loaded_blocks = 0          # CPU -> GPU
        self.hit_tokens = 0             # tokens loaded for new requests (vLLM's connector hit stats)
        self.preempted_hit_tokens = 0   # ... for resumed ones
        #: uid -> blocks offered to the tier so far (vLLM ``_next_stored_block_idx``; kept across
        #: preemptions, dropped when the request finishes)
        self.offered: dict[int, int] = {}
        #: (request, blocks hit in all) of the last lookup that found CPU blocks: its allocation,
        #: if it succeeds, starts offering past the hit (loaded blocks are stored already)
        self._pending: tuple[Request, int] | None = None

    # ---- lookup -------------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, req: Request, num_computed_tokens: int) -> tuple[int, bool]:
        """CPU hits after the GPU hit, up to the GPU rule's ``num_tokens - 1`` cap (whole blocks)."""
        self._pending = None
        B = self.block_size
        nfull = req.num_tokens // B
        keys = self.kv.block_keys(req, 0, nfull)
        self.cpu.touch(keys)
        gpu = num_computed_tokens // B
        if nfull - gpu < 1:
            return 0, False
        n = self.cpu.lookup(keys[gpu:(req.num_tokens - 1) // B])
        self._pending = (req, gpu + n) if n else None
        return n * B, False

    def update_state_after_alloc(self, req: Request, blocks: int, num_external_tokens: int) -> None:
        if not num_external_tokens:
            return
        self._take_pending(req)
        n = num_external_tokens // self.block_size
        self.loaded_blocks += n
        if req.status == Status.PREEMPTED:
            self.preempted_hit_tokens += num_external_tokens
        else:
            self.hit_tokens += num_external_tokens

    def _take_pending(self, req: Request) -> None:
        p = self._pending
        if p is not None and p[0] is req:
            self._pending = None
            self.offered[req.uid] = p[1]

    # ---- stores: every filled block is offered to the CPU tier ----------------------------------
    def save_blocks(self, req: Request, start: int, stop: int) -> None:
        """Offer the blocks filled since the last offer. A store that finds no room is offered
        again when the request fills its next block (vLLM: at its next step)."""
        self._take_pending(req)  # the allocation that adopted a CPU hit registers first
        offered = self.offered.get(req.uid, 0)
        if stop <= start or stop <= offered:
            return
        keys = self.kv.block_keys(req, 0, stop)
        stored = self.cpu.store(keys[offered:stop])
        if stored is None:
            return  # no room: offered again at the request's next registration
        self.offered[req.uid] = stop
        if stored:
            self.cpu.touch(keys)

    # ---- no asynchronous transfers --------------------------------------------------------------
    def get_finished(self, now: float) -> tuple[set[int], set[int]]:
        return set(), set()

    def next_finished_s(self) -> float | None:
        return None

    def request_finished(self, req: Request, blocks: int) -> tuple[bool, dict[str, Any] | None]:
        self.offered.pop(req.uid, None)
        return False, None

    def stats(self) -> ConnectorStats:
        c = self.cpu
        return ConnectorStats(c.num_blocks, self.hit_tokens, self.preempted_hit_tokens, self.loaded_blocks,
                              c.stored_blocks, c.evictions)

    def check(self) -> None:
        self.cpu.check()
