"""Attention windows: which of a request's blocks a KV-cache group still needs, and its prefix-hit rule.

vLLM 0.33 gives each KV-cache group a single-type manager
(``vllm/v1/core/single_type_kv_cache_manager.py``); kvsim keeps their two rules as plain functions:

* **skipped tokens** (``get_num_skipped_tokens``): tokens a group never reads again once
  ``c`` tokens are computed. Their whole blocks are released to the pool and the table entry
  becomes the null block (``remove_skipped_blocks``)::

      full            0
      sliding_window  max(0, c - window + 1)             window 8, B 4, c 13: tokens 0-5 skipped
      chunked_local   c // chunk * chunk                 chunk 8,  B 4, c 13: tokens 0-7 skipped

      sliding, c = 13   table [ null ][ 5 ][ 9 ][ 2 ]    block 0 (tokens 0-3) released
                                   ^ tokens 4-7 hold 6, 7: still in the window of token 13

* **longest cache hit** (``find_longest_cache_hit``), given ``lookup(j)``: the blocks cached
  under the request's j-th block hash in every group of one spec, or None.

      full            blocks 0, 1, ... from the left until the first miss
      sliding_window  scanning right to left, the last run of cdiv(window - 1, B) cached blocks;
                      the blocks before it are null. A run reaching block 0 counts even if
                      shorter.                              [null null 8 3] for window 8, B 4
      chunked_local   blocks before the current chunk are null; then from the left until a miss
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.model.attention import KvCacheGroup, blocks_per_request

WINDOW_KINDS = ("sliding_window", "chunked_local")
NULL = 0  # the null block's id (BlockPool with null_block=True)

Lookup = Callable[[int], "list[int] | None"]


@dataclass(frozen=True, slots=True)
class KvGroup:
    """One KV-cache group sharing the pool: its attention kind, window (tokens; 0 for full) and
    the per-request admission cap in blocks (``max_admission_blocks_per_request``; 0 = none)."""

    kind: str = "full"
    window: int = 0
    admission_cap: int = 0

    @property
    def windowed(self) -> bool:
        return self.kind in WINDOW_KINDS


def skipped_tokens(g: KvGroup, computed: int) -> int:
    """Tokens before the window of the next token once ``computed`` are computed."""
    if g.kind == "sliding_window":
        return max(0, computed - g.window + 1)
    if g.kind == "chunked_local":
        return computed // g.window * g.window
    return 0


def _hits_from(lookup: Lookup, start: int, stop: int, ngroups: int) -> list[list[int]]:
    """Nulls for blocks ``0..start``, then cached blocks from ``start`` until the first miss."""
    out = [[NULL] * start for _ in range(ngroups)]
    for j in range(start, stop):
        blocks = lookup(j)
        if blocks is None:
            break
        for o, b in zip(out, blocks, strict=True):
            o.append(b)
    return out


def full_hit(lookup: Lookup, max_blocks: int, ngroups: int) -> list[list[int]]:
    """Full attention: cached blocks from the left until the first miss."""
    return _hits_from(lookup, 0, max_blocks, ngroups)


def sliding_hit(lookup: Lookup, max_blocks: int, ngroups: int, window: int, B: int) -> list[list[int]]:
    """Sliding window: the last run of ``cdiv(window - 1, B)`` cached blocks, nulls before it."""
    need = -(-(window - 1) // B)
    out = [[NULL] * max_blocks for _ in range(ngroups)]
    run = 0
    for j in range(max_blocks - 1, -1, -1):
        blocks = lookup(j)
        if blocks is None:
            run = 0
            continue
        for o, b in zip(out, blocks, strict=True):
            o[j] = b
        run += 1
        if run >= need:
            for o in out:
                del o[j + run:]
            return out
    for o in out:  # no full run: the run that reaches block 0 is a hit even if shorter
        del o[run:]
    return out


def chunked_hit(lookup: Lookup, max_len: int, ngroups: int, chunk: int, B: int) -> list[list[int]]:
    """Chunked local attention: nulls before the chunk of token ``max_len``, then cached blocks."""
    start = max_len // chunk * chunk // B if max_len > 0 else 0
    return _hits_from(lookup, start, max_len // B, ngroups)


def group_hit(g: KvGroup, lookup: Lookup, max_len: int, ngroups: int, B: int) -> list[list[int]]:
    """The hit rule of ``g``'s kind for ``ngroups`` groups of that spec, capped at ``max_len`` tokens."""
    if g.kind == "sliding_window":
        return sliding_hit(lookup, max_len // B, ngroups, g.window, B)
    if g.kind == "chunked_local":
        return chunked_hit(lookup, max_len, ngroups, g.window, B)
    return full_hit(lookup, max_len // B, ngroups)


def kv_groups(groups: Sequence[KvCacheGroup], max_model_len: int, block_size: int,
              max_num_batched_tokens: int) -> tuple[KvGroup, ...]:
    """vLLM's KV-cache groups (:func:`sim.model.attention.kv_cache_groups`) as the allocator sees them;
    a windowed group's admission cap is its blocks at peak (:func:`sim.model.attention.blocks_per_request`)."""
    return tuple(KvGroup(g.kind, g.window or 0,
                         blocks_per_request(g, max_model_len, block_size, max_num_batched_tokens)
                         if g.kind in WINDOW_KINDS else 0) for g in groups)
