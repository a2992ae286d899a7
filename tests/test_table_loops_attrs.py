"""The allocator's loops (``sim/kv/table_loops.py``, compiled by Cython or not) read and write a
request's and a table's attributes as ``getattr``/``setattr`` would: a type changed after a first
read, a type with its own ``__getattribute__`` or ``__setattr__``, a subclass, an unset slot.

Tested through ``table_loops.register_decoded`` (it reads ``kv``, ``num_computed_tokens`` and
``content`` of a request, ``blocks`` and ``num_registered`` of its table, and writes
``num_registered``), on stand-in classes.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.kv import table_loops
from sim.kv.block_pool import UNPUBLISHED

B = 4


class Table:
    __slots__ = ("blocks", "num_registered")

    def __init__(self, blocks: list[int], registered: int = 0) -> None:
        self.blocks, self.num_registered = blocks, registered


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
    class T2:
        __slots__ = ("blocks", "num_registered")

    def fresh(computed: int) -> Any:
        t = T2()
        t.blocks, t.num_registered = [1, 2], 0
        return Req(t, computed)

    bh: list[Any] = [None] * 4
    mark([fresh(4)], bh)  # T2's slots read once
    assert bh[1] is UNPUBLISHED
    writes: list[int] = []
    slot = T2.num_registered  # the member descriptor
    monkeypatch.setattr(T2, "num_registered", property(lambda self: 1, lambda self, v: writes.append(v)))
    r, bh = fresh(8), [None] * 4  # (its write of 0 went to the property; it answers 1)
    writes.clear()
    assert mark([r], bh) == []
    assert bh[2] is UNPUBLISHED and writes == [2], "the property was not used once the type changed"
    monkeypatch.setattr(T2, "num_registered", slot)
    r, bh = fresh(4), [None] * 4
    mark([r], bh)
    assert bh[1] is UNPUBLISHED and r.kv.num_registered == 1


def test_own_getattribute_and_setattr_are_honoured() -> None:
    reads: list[str] = []

    class Seen(Req):
        __slots__ = ()

        def __getattribute__(self, name: str) -> Any:
            reads.append(name)
            return object.__getattribute__(self, name)

    class Frozen(Table):
        __slots__ = ()

        def __setattr__(self, name: str, value: Any) -> None:
            raise AttributeError(f"frozen: {name}")

    bh: list[Any] = [None] * 4
    mark([Seen(Table([1]), 4)], bh)
    assert {"kv", "num_computed_tokens", "content"} <= set(reads)
    t = Table([2])
    object.__setattr__(t, "__class__", Frozen)
    with pytest.raises(AttributeError, match="frozen: num_registered"):
        mark([Req(t, 4)], [None] * 4)


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
