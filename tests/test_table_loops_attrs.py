"""The allocator's loops (``sim/kv/table_loops.py``, compiled by Cython or not) read and write a
request's fields: compiled, as struct members of :class:`~sim.request.Request` (``request.pxd``),
else as attributes; either way the values a request holds. A table is a
:class:`~sim.kv.block_table.BlockTable` (compiled, its fields are C struct members too).

Tested through ``table_loops.register_decoded`` (it reads ``kv``, ``num_computed_tokens`` and
``content`` of a request, ``blocks`` and ``num_registered`` of its table, and writes
``num_registered``).
"""

from __future__ import annotations

from typing import Any

from sim.kv import table_loops
from sim.kv.block_pool import UNPUBLISHED
from sim.kv.block_table import BlockTable
from sim.request import Request

B = 4


def req(blocks: list[int], computed: int, cls: type[Request] = Request, content: Any = None) -> Request:
    r = cls(uid=0, request_id="r", arrival_s=0.0, prompt_tokens=computed, output_tokens=4, content=content,
            num_computed_tokens=computed)
    r.kv = BlockTable(blocks=blocks)
    return r


def mark(reqs: list[Request], bh: list[Any]) -> list[tuple[Request, int]]:
    """register_decoded on ``reqs`` (ahead 0); returns the slow calls it made."""
    calls: list[tuple[Request, int]] = []
    table_loops.register_decoded(reqs, 0, B, bh, UNPUBLISHED, lambda r, upto: calls.append((r, upto)))
    return calls


def test_a_filled_block_is_marked_and_the_table_counts_it() -> None:
    bh: list[Any] = [None] * 8
    reqs = [req([3, 5], 4), req([6], 4)]
    assert mark(reqs, bh) == []
    assert bh[3] is UNPUBLISHED and bh[6] is UNPUBLISHED and bh[5] is None
    assert [r.kv.num_registered for r in reqs] == [1, 1]


def test_a_request_with_content_or_a_block_not_filled_takes_the_allocators_registration() -> None:
    bh: list[Any] = [None] * 8
    with_content, partial = req([1], 4, content=("ids", (1, 2, 3, 4))), req([2], 3)
    assert mark([with_content, partial], bh) == [(with_content, 4), (partial, 3)]
    assert bh == [None] * 8
    assert with_content.kv.num_registered == partial.kv.num_registered == 0


def test_a_subclass_is_read_as_the_request_it_is() -> None:
    class Tagged(Request):
        def tag(self) -> str:
            return f"#{self.uid}"

    bh: list[Any] = [None] * 4
    r = req([1], 4, Tagged)
    assert mark([r], bh) == []
    assert bh[1] is UNPUBLISHED and r.kv.num_registered == 1
    assert r.tag() == "#0"


def test_a_value_assigned_is_the_value_read() -> None:
    r = req([1, 2], 4)
    r.num_computed_tokens = 8  # the second block is now the filled one
    r.kv.num_registered = 1
    bh: list[Any] = [None] * 4
    assert mark([r], bh) == []
    assert bh[2] is UNPUBLISHED and bh[1] is None
    assert r.kv.num_registered == 2
