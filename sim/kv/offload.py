"""Paged allocator with a CPU offload tier (``--kv-offloading-size``, vLLM 0.33's native backend).

vLLM's ``OffloadingConnector`` (followed: ``vllm/distributed/kv_transfer/kv_connector/v1/
offloading/scheduler.py``, ``OffloadingConnectorScheduler``) is *write-through*: every block a
request fills is stored to the CPU tier (:class:`~sim.kv.cpu_tier.CpuTier`) in the step that
computes it, whether or not the GPU copy is ever evicted. A request's prefix is looked up on the
GPU first; the CPU tier continues the hit from the first GPU miss and those blocks are loaded
back into fresh GPU blocks::

    prompt blocks     0     1     2     3     4     5
    GPU prefix cache  hit   hit   miss                      -> 2 GPU hits
    CPU tier                      hit   hit   miss          -> 2 loads (CPU_HIT entries)
    hits = [b0, b1, CPU_HIT, CPU_HIT]: 4 blocks computed; blocks 2, 3 come over PCIe

Per step: ``get_num_new_matched_tokens`` touches all the request's full blocks, then looks up
from the GPU hit (nothing if less than a block remains); after a successful allocation with a
load the request's next block to offer is the first one past the hit
(``update_state_after_alloc``); ``_get_reqs_to_store`` offers each request's newly filled blocks
and, if any was stored, touches the request's blocks. kvsim does these at schedule time, request
by request, instead of once after the step is scheduled; see README "Fidelity" for what else
differs (loads are charged to the admitting step instead of delaying the request).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sim.kv.base import CPU_HIT
from sim.kv.cpu_tier import CpuTier
from sim.kv.paged import PagedAllocator, table_of
from sim.request import Request, Status


def split_hits(hits: Sequence[int]) -> tuple[Sequence[int], int]:
    """(GPU hit blocks, number of CPU hits) of a hit list."""
    ncpu = hits.count(CPU_HIT) if hits else 0
    return (hits[:len(hits) - ncpu] if ncpu else hits), ncpu


class OffloadingAllocator(PagedAllocator):
    """:class:`PagedAllocator` (one full-attention group, prefix caching on) + a CPU LRU tier."""

    def __init__(self, num_blocks: int, block_size: int, *, cpu_blocks: int, null_block: bool = True,
                 free_order: str = "front-tail") -> None:
        super().__init__(num_blocks, block_size, null_block=null_block, free_order=free_order)
        self.cpu = CpuTier(cpu_blocks)
        self.loaded_blocks = 0          # CPU -> GPU
        self.hit_tokens = 0             # tokens loaded for new requests (vLLM's connector hit stats)
        self.preempted_hit_tokens = 0   # ... for resumed ones

    # ---- lookup -------------------------------------------------------------------------------
    def get_computed_blocks(self, req: Request) -> list[int]:
        """GPU hits, then CPU hits (``CPU_HIT``) up to the same ``num_tokens - 1`` cap."""
        hits = super().get_computed_blocks(req)
        B = self.block_size
        table, key = table_of(req), self.hasher.key
        nfull = req.num_tokens // B
        keys = [key(req, table, j) for j in range(nfull)]
        self.cpu.touch(keys)
        if nfull - len(hits) < 1:
            return hits
        n = self.cpu.lookup(keys[len(hits):(req.num_tokens - 1) // B])
        return hits + [CPU_HIT] * n if n else hits

    # ---- allocation: a CPU hit is a fresh block --------------------------------------------------
    def blocks_needed(self, req: Request, num_tokens: int, hits: Sequence[int] = ()) -> int:
        return super().blocks_needed(req, num_tokens, split_hits(hits)[0])

    def can_allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                     *, reserve: int = 0) -> int:
        gpu, ncpu = split_hits(hits)
        return super().can_allocate(req, num_new_tokens + ncpu * self.block_size, gpu, reserve=reserve)

    def allocate(self, req: Request, num_new_tokens: int, hits: Sequence[int] = (),
                 *, reserve: int = 0) -> bool:
        gpu, ncpu = split_hits(hits)
        if not ncpu:
            return super().allocate(req, num_new_tokens, hits, reserve=reserve)
        table = table_of(req)
        offered, table.num_offered = table.num_offered, len(hits)  # loaded blocks are stored already
        if not super().allocate(req, num_new_tokens + ncpu * self.block_size, gpu, reserve=reserve):
            table.num_offered = offered
            return False
        self.loaded_blocks += ncpu
        if req.status == Status.PREEMPTED:
            self.preempted_hit_tokens += ncpu * self.block_size
        else:
            self.hit_tokens += ncpu * self.block_size
        return True

    # ---- stores: every filled block is offered to the CPU tier ----------------------------------
    def register_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Register, then offer the blocks filled since the last offer. A store that finds no
        room is offered again when the request fills its next block (vLLM: at its next step)."""
        table = req.kv
        before = table.num_registered
        super().register_full_blocks(req, num_tokens)
        full = table.num_registered
        if full <= before or full <= table.num_offered:
            return
        bh, blocks = self.pool.block_hash, table.blocks
        stored = self.cpu.store([bh[blocks[j]] for j in range(table.num_offered, full)])
        if stored is None:
            return  # no room: offered again at the request's next registration
        table.num_offered = full
        if stored:
            self.cpu.touch([bh[b] for b in blocks[:full]])

    def register_decoded_blocks(self, reqs: list[Request], ahead: int) -> None:
        for r in reqs:
            self.register_full_blocks(r, r.num_computed_tokens + ahead)

    def check(self, live: Iterable[Request] = ()) -> None:
        super().check(live)
        self.cpu.check()
