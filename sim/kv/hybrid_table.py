"""A request's KV state under several KV-cache groups: one block table per group.

Every group's table has one entry per logical block (``B`` tokens); a windowed group's entries
for blocks outside the window are the null block (0). Gemma-3 style, one full group F and one
sliding group S (window 8, B 4), 14 tokens computed::

    logical   [  0  ][  1  ][  2  ][  3  ]
    F            7     12     3      9          every block held
    S          null    5     11      2          block 0 released: tokens 0-3 are out of the window

The content key of block j is the same for every group (it depends on the tokens only); it is
cached once, in ``tables[0].hashes``. The pool registers block j of group g under
``key * num_groups + g``, so groups never share a block (vLLM keys its map by (hash, group)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.kv.block_table import BlockTable


@dataclass(slots=True, eq=False)
class HybridTable:
    tables: list[BlockTable] = field(default_factory=list)
    nulls: int = 0                 # null entries in all the tables (blocks released by windows)


class GroupHits(list[int]):
    """A prefix hit over several groups. As a list it has one entry per hit block (group 0's
    blocks, so ``len(hits) * B`` is the hit in tokens); ``groups[g]`` is group g's blocks, with
    the null block where a window skips."""

    __slots__ = ("groups",)

    def __init__(self, groups: list[list[int]]) -> None:
        super().__init__(groups[0])
        self.groups = groups
