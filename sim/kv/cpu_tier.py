"""The CPU tier of KV offloading: vLLM 0.33's native CPU backend, an LRU of offloaded blocks.

Followed: ``vllm/v1/kv_offload/cpu/manager.py`` (``CPUOffloadingManager``: ``lookup``,
``touch``, ``prepare_store``) and ``vllm/v1/kv_offload/cpu/policies/lru.py``
(``LRUCachePolicy``). Blocks are keyed by content (the prefix-cache key), not by GPU block::

    least recently used                                   most recently used
    [ k7 ][ k2 ][ k9 ] ... [ k40 ][ k41 ]  <- store appends, touch moves to this end
      ^ evicted first when a store needs room (never a key of the same store)

``touch(keys)`` walks ``keys`` backwards, so the first block of a prefix ends most recent and
a prefix is evicted from its tail. A store that cannot find room changes nothing (vLLM logs
"cannot store" and tries again at the request's next step). Loads and stores complete within
the step that starts them (vLLM runs them asynchronously and holds a loading block's reference
until the copy ends), so no block is ever pinned here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class CpuTier:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks: OrderedDict[int, None] = OrderedDict()  # content key, least recent first
        self.stored_blocks = 0
        self.evictions = 0
        self.failed_stores = 0

    def lookup(self, keys: Sequence[int]) -> int:
        """How many of ``keys``, from the first, are stored (stops at the first miss)."""
        n = 0
        for k in keys:
            if k not in self.blocks:
                break
            n += 1
        return n

    def touch(self, keys: Sequence[int]) -> None:
        """Make the stored ones among ``keys`` most recent, the first one most of all."""
        blocks = self.blocks
        move = blocks.move_to_end
        for k in reversed(keys):
            if k in blocks:
                move(k)

    def store(self, keys: Sequence[int]) -> int | None:
        """``prepare_store``: give the keys not stored yet a CPU block, evicting the least
        recently used others if full. Returns how many were stored, None if there is no room."""
        blocks = self.blocks
        new = [k for k in keys if k not in blocks]
        if not new:
            return 0
        over = len(blocks) + len(new) - self.num_blocks
        if over > 0:
            protected = set(keys)
            victims = []
            for k in blocks:
                if k not in protected:
                    victims.append(k)
                    if len(victims) == over:
                        break
            if len(victims) < over:
                self.failed_stores += 1
                return None
            for k in victims:
                del blocks[k]
            self.evictions += over
        for k in new:
            blocks[k] = None
        self.stored_blocks += len(new)
        return len(new)

    def check(self) -> None:
        assert len(self.blocks) <= self.num_blocks, "CPU tier over capacity"
