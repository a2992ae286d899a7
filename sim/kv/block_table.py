"""A request's paged KV state: its block table and its chained block hashes.

The table maps logical blocks to scattered physical ones; only the last block may be
partial (``B`` = block_size = 4 here)::

    tokens   0 1 2 3 | 4 5 6 7 | 8 . . .          9-token prompt, B = 4
    logical  [  0    ][   1    ][   2    ]
    physical    7         3        12             last block 1/4 full: 3 slots unused
    token 37 -> logical block 37 // 4 = 9, slot 37 % 4 = 1

``hashes[j]`` is the content key of logical block ``j`` (computed lazily, kept across
preemptions: it depends on content only); the first ``num_registered`` blocks of the table
are registered in the prefix cache (for a request without content, perhaps only marked: see
:mod:`sim.kv.block_pool`, unpublished blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.request import Request


@dataclass(slots=True, eq=False)
class BlockTable:
    blocks: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    num_registered: int = 0


def table_of(req: Request) -> BlockTable:
    """The request's block table, created on first use."""
    t = req.kv
    if t is None:
        t = req.kv = BlockTable()
    return t
