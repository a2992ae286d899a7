"""The longest prefix hit common to several KV-cache groups (vLLM 0.33's
``kv_cache_coordinator.py:HybridKVCacheCoordinator.find_longest_cache_hit``).

Groups with the same spec are looked up together: a block hits only if every group of the spec
has it cached. Full attention goes first (its left-to-right scan bounds the rest), then each
other spec within the hit so far; if any spec shortens the hit, all are checked again, until
none does (one pass for one full + one other spec). Full-attention hits are cut to the result::

    full     [ 5 ][ 6 ][ 7 ][ 8 ][ 9 ]  . .      5 blocks cached from the left
    sliding  [ . ][ . ][ . ][ 3 ][ 4 ]  ^ miss   within 5 blocks: the last 2 in a row (window 8, B 4)
    hit      5 blocks: full [5 6 7 8 9], sliding [null null null 3 4]
"""

from __future__ import annotations

from collections.abc import Callable

from sim.kv.window import KvGroup, Lookup, group_hit


def longest_hit(specs: list[tuple[KvGroup, list[int]]], simple: bool, lookup_for: Callable[[list[int]], Lookup],
                num_groups: int, max_len: int, B: int) -> tuple[list[list[int]], int]:
    """Per-group hit blocks and the hit in tokens, at most ``max_len``.

    ``specs``: (spec, its group ids), full attention first; ``simple``: one full + one other
    spec (one pass suffices); ``lookup_for(ids)``: the block lookup for those groups.
    """
    per_group: list[list[int]] = [[] for _ in range(num_groups)]
    hit = max_len
    while True:
        curr = hit
        for spec, ids in specs:
            found = group_hit(spec, lookup_for(ids), curr, len(ids), B)
            curr = len(found[0]) * B
            for g, blocks in zip(ids, found, strict=True):
                per_group[g] = blocks
        if curr >= hit:
            break
        hit = curr
        if simple:
            break
    for spec, ids in specs:
        if not spec.windowed:
            for g in ids:
                del per_group[g][hit // B:]
    return per_group, hit
