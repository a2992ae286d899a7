"""The allocator's loops (``sim/kv/table_loops.py``, compiled by Cython or not) read a request's
attributes as ``getattr`` would: a type changed after a first read, a type with its own
``__getattribute__``, a subclass, a class without slots, an unset slot. A table is a
:class:`~sim.kv.block_table.BlockTable` (compiled, its fields are C struct members).

Tested through ``table_loops.register_decoded`` (it reads ``kv``, ``num_computed_tokens`` and
``content`` of a request, ``blocks`` and ``num_registered`` of its table, and writes
``num_registered``), on stand-in request classes.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.kv import table_loops
from sim.kv.block_pool import UNPUBLISHED
from sim.kv.block_table import BlockTable

B = 4


def Table(blocks: list[int], registered: int = 0) -> BlockTable:  # (a stand-in for a table class)
    return BlockTable(blocks=blocks, num_registered=registered)


class Req:
    __slots__ = ("content", "kv", "num_computed_tokens")

    def __init__(self, table: Any, computed: int) -> None:
        self.kv, self.num_computed_tokens, self.content = table, computed, None


def mark(reqs: list[Any], bh: list[Any], slow: Any = None) -> list[tuple[Any, int]]:
    """register_decoded on ``reqs`` (ahead 0); returns the slow calls it made."""
    calls: list[tuple[Any, int]] = []
    table_loops.register_decoded(reqs, 0, B, bh, UNPUBLISHED, slow or (lambda r, upto: calls.append((r, upto))))
    return calls


def test_a_slotted_request_is_marked_through_its_slots() -> None:
    bh: list[Any] = [None] * 8
    reqs = [Req(Table([3, 5]), 4), Req(Table([6]), 4)]
    assert mark(reqs, bh) == []
    assert bh[3] is UNPUBLISHED and bh[6] is UNPUBLISHED and bh[5] is None
    assert [r.kv.num_registered for r in reqs] == [1, 1]


def test_a_type_changed_after_a_read_is_read_as_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    class R2:
        __slots__ = ("content", "kv", "num_computed_tokens")

    def fresh(computed: int) -> Any:
        r = R2()
        r.kv, r.num_computed_tokens, r.content = Table([1, 2]), computed, None
        return r

    bh: list[Any] = [None] * 4
    mark([fresh(4)], bh)  # R2's slots read once
    assert bh[1] is UNPUBLISHED
    r = fresh(4)
    monkeypatch.setattr(R2, "num_computed_tokens", property(lambda self: 8))
    bh = [None] * 4
    assert mark([r], bh) == [(r, 8)], "not the fast case at 8 tokens: the allocator's own registration"
    assert bh[1] is None and bh[2] is None
    assert r.kv.num_registered == 0


def test_own_getattribute_is_honoured() -> None:
    reads: list[str] = []

    class Seen(Req):
        __slots__ = ()

        def __getattribute__(self, name: str) -> Any:
            reads.append(name)
            return object.__getattribute__(self, name)

    bh: list[Any] = [None] * 4
    mark([Seen(Table([1]), 4)], bh)
    assert {"kv", "num_computed_tokens", "content"} <= set(reads)
    assert bh[1] is UNPUBLISHED


def test_an_unset_slot_raises_attribute_error_and_other_types_still_work() -> None:
    r = Req(Table([1]), 4)
    del r.num_computed_tokens
    with pytest.raises(AttributeError, match="num_computed_tokens"):
        mark([r], [None] * 4)

    class Plain:  # no slots: the generic lookups
        def __init__(self, table: Any, computed: int) -> None:
            self.kv, self.num_computed_tokens, self.content = table, computed, None

    bh: list[Any] = [None] * 4
    mark([Req(Table([1]), 4), Plain(Table([2]), 4), Req(Table([3]), 4)], bh)
    assert bh[1:4] == [UNPUBLISHED] * 3
