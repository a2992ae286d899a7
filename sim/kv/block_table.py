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

Compiled by Cython where a C compiler is (``block_table.pxd``: the allocator's compiled loops,
:mod:`sim.kv.table_loops`, read and write a table's fields as C struct members), else run as is.
"""

from __future__ import annotations

from sim.request import Request


class BlockTable:
    """``blocks``, ``hashes`` (new empty lists unless given) and ``num_registered`` (0). A plain
    class, not a dataclass: compiled, it is an extension type whose fields the allocator's loops
    reach as struct members (about 10 instructions, where an attribute lookup takes 140)."""

    def __init__(self, blocks: list[int] | None = None, hashes: list[int] | None = None,
                 num_registered: int = 0) -> None:
        self.blocks: list[int] = [] if blocks is None else blocks
        self.hashes: list[int] = [] if hashes is None else hashes
        self.num_registered = num_registered

    def __repr__(self) -> str:
        return f"BlockTable(blocks={self.blocks!r}, hashes={self.hashes!r}, num_registered={self.num_registered!r})"


def table_of(req: Request) -> BlockTable:
    """The request's block table, created on first use."""
    t = req.kv
    if t is None:
        t = req.kv = BlockTable()
    return t
