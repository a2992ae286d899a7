"""Admission rules: may this request take blocks now? One place for every caller.

Used by new admissions (``Scheduler.admit``), the cheap head-of-line check
(:meth:`Admission.hopeless`) and swap-in. Two rules (vllm-v1-semantics.md s5):

* **full-ISL reserve** (V1 0.33): a new request is admitted only if blocks for its *whole*
  current sequence are free, though only the first chunk is allocated now;
* **watermark** (paper-v0: 1 % of the pool): keep ``watermark_blocks`` free while anything
  runs, so running requests can grow.

Running requests' per-step growth is not admission: it only needs the blocks it takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.kv.base import KvAllocator
from sim.request import Request


def fits(kv: KvAllocator, need: int) -> bool:
    """``need <= kv.num_free_blocks``, noted in the pool's :attr:`~KvAllocator.headroom`."""
    slack = kv.num_free_blocks - need
    margin = kv.headroom
    return margin.note(slack) if margin is not None else slack >= 0


@dataclass(frozen=True, slots=True)
class Admission:
    reserve_full_isl: bool = True
    watermark_blocks: int = 0

    def headroom(self, has_running: bool) -> int:
        return self.watermark_blocks if has_running else 0

    def admit(self, kv: KvAllocator, req: Request, num_new_tokens: int, hits: Sequence[int],
              has_running: bool, *, cache: bool = True) -> bool:
        """Allocate ``num_new_tokens`` (adopting ``hits``) if the rules allow; else change nothing.
        ``cache=False``: the blocks are for an asynchronous load (published when it arrives)."""
        wm = self.watermark_blocks if has_running else 0
        if self.reserve_full_isl and not fits(kv, kv.blocks_needed(req, req.num_tokens, hits) + wm):
            return False
        return kv.allocate(req, num_new_tokens, hits, reserve=wm, cache=cache)

    def admit_hopeful(self, kv: KvAllocator, req: Request, num_new_tokens: int, hits: Sequence[int],
                      has_running: bool) -> bool:
        """:meth:`admit`, right after :meth:`hopeless` said False for ``req`` with the pool as it
        was then: without content or hits, its reserve is the very comparison hopeless made
        (noted already), so only the allocation is left."""
        if self.reserve_full_isl and req.content is None and not hits:
            return kv.allocate(req, num_new_tokens, hits, reserve=self.watermark_blocks if has_running else 0)
        return self.admit(kv, req, num_new_tokens, hits, has_running)

    def hopeless(self, kv: KvAllocator, req: Request, has_running: bool) -> bool:
        """True if :meth:`admit` must fail whatever the prefix probe finds.

        A request with no shareable content can only hit its own blocks from before a
        preemption; those sit in the free queue (ref 0) and count against capacity, so its
        need is exactly its blocks for ``num_tokens``. Same decision as probing, much cheaper
        when a blocked head is retried every step.
        """
        if not self.reserve_full_isl or req.content is not None:
            return False
        wm = self.watermark_blocks if has_running else 0
        return not fits(kv, kv.blocks_needed(req, req.num_tokens) + wm)

    def may_resume(self, kv: KvAllocator, req: Request) -> bool:
        """Swap-in: the request's whole sequence plus the watermark must be free."""
        return fits(kv, kv.blocks_needed(req, req.num_tokens) + self.watermark_blocks)
