"""Step records from rows (``sim/io/fill.py``, compiled by Cython where built) are
``np.fromiter``'s bytes, and the compiled module writes what its own ``.py`` writes as Python."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sim.io import fill
from sim.io.records import STEP_DTYPE, StepLog, StepRecord
from tests.helpers import as_python


def random_rows(rng: np.random.Generator, n: int) -> list[StepRecord]:
    rows = []
    for i in range(n):
        ints = [int(x) for x in rng.integers(-(2**40), 2**40, 15)]
        start, dur = float(rng.random() * 1e5), float(rng.random())
        row = [i, start, dur, *ints[:14]]
        if i % 7 == 0:
            row[3] = np.int64(row[3])  # a numpy int in an int field
            row[2] = 0                 # a Python int in a float field
        rows.append(StepRecord(*row))
    return rows


def buffered(rows: list[Any], mod: Any = fill) -> np.ndarray:
    """``rows`` appended to a RowBuffer of ``mod`` (from a capacity of 3: it grows), as records."""
    buf = mod.RowBuffer(STEP_DTYPE, capacity=3)
    for r in rows:
        buf.append(r)
    return buf.records(0, len(buf))


def test_the_buffer_writes_fromiters_bytes() -> None:
    rows = random_rows(np.random.default_rng(0), 3000)
    ref = np.fromiter(rows, dtype=STEP_DTYPE, count=len(rows))
    assert buffered(rows).tobytes() == ref.tobytes()
    plain = [tuple(r) for r in rows]  # as the engine appends them
    assert buffered(plain).tobytes() == ref.tobytes()
    assert buffered([]).shape == (0,)


def test_a_log_frames_the_rows_as_fromiter_does() -> None:
    rows = random_rows(np.random.default_rng(1), 500)
    log = StepLog()
    for r in rows:
        log.append(r)
    ref = np.fromiter(rows, dtype=STEP_DTYPE, count=len(rows))
    assert log.frame().to_records(index=False).tobytes() == ref.tobytes()


def test_bad_rows_raise_instead_of_writing_garbage() -> None:
    buf = fill.RowBuffer(STEP_DTYPE)
    with pytest.raises(TypeError, match="tuple of 17 fields"):
        buf.append((1, 2.0))  # (a short row)
    with pytest.raises(TypeError, match="tuple of 17 fields"):
        buf.append([0] * 17)  # (not a tuple)
    with pytest.raises(TypeError):
        buf.append(StepRecord(*(["x"] + [0] * 16)))  # type: ignore[arg-type]  # (a str step)
    with pytest.raises(TypeError):
        buf.append(StepRecord(*([1, 0.0, 0.0, 2.5] + [0] * 13)))  # (a float in an int field)
    assert len(buf) == 0


def test_the_compiled_module_writes_what_its_source_writes_as_python() -> None:
    py = as_python(fill)
    rows = random_rows(np.random.default_rng(5), 400)
    got: list[Any] = []
    for f in (fill, py):
        a = buffered(rows[50:350], f)
        cols = np.empty((len(rows), 3), np.float64)
        flat = cols.reshape(-1).data
        f.gather_attrs(rows, ("start_s", "duration_s", "step"), None, flat)
        got.append((a.tobytes(), cols.tobytes()))
    assert got[0] == got[1]


def test_a_log_with_runs_between_its_tuples_frames_them_in_order() -> None:
    """Tuples, a deferred part, more tuples, two parts, a last tuple: one array, every record in
    its place (the tuples written straight between the parts)."""
    from sim.io.records import concat_steps

    rows = random_rows(np.random.default_rng(4), 12)
    as_array = [np.fromiter([r], dtype=STEP_DTYPE, count=1) for r in rows]
    log, order = StepLog(), []
    for i, kind in enumerate("ttpttppt"):
        if kind == "t":
            log.append(rows[i])
        else:
            log.defer(concat_steps, as_array[i], 1)
        order.append(i)
    ref = np.fromiter([rows[i] for i in order], dtype=STEP_DTYPE, count=len(order))
    frame = log.frame()
    assert np.array_equal(frame["step"].to_numpy(), ref["step"]) and len(frame) == 8
    assert frame.to_records(index=False).tobytes() == ref.tobytes()


def test_the_row_buffer_holds_what_fromiter_writes_and_grows() -> None:
    rows = random_rows(np.random.default_rng(6), 700)
    buf = fill.RowBuffer(STEP_DTYPE, capacity=3)  # grows 3, 6, 12, ... past 700
    for r in rows:
        buf.append(tuple(r))
    ref = np.fromiter(rows, dtype=STEP_DTYPE, count=len(rows))
    assert len(buf) == 700
    assert buf.records(0, 700).tobytes() == ref.tobytes()
    assert buf.records(100, 250).tobytes() == buf.view(100, 250).tobytes() == ref[100:250].tobytes()
    buf.clear()
    assert len(buf) == 0 and buf.records(0, 0).size == 0
    buf.append(tuple(rows[5]))
    assert buf.records(0, 1).tobytes() == ref[5:6].tobytes()


def test_a_requests_fields_are_gathered_as_getattr_reads_them() -> None:
    """Compiled, a Request's numeric fields are read as struct members: the same values."""
    from sim.request import Request, Status

    class Sub(Request):
        pass

    reqs = [Request(uid=i, request_id=str(i), arrival_s=0.5 * i, prompt_tokens=100 + i, output_tokens=7,
                    parent=i - 1, num_computed_tokens=3 * i, status=Status.RUNNING) for i in range(5)]
    reqs.append(Sub(uid=5, request_id="5", arrival_s=9.0, prompt_tokens=1, output_tokens=2))
    for names in (tuple(fill.NUMERIC), ("status", "uid", "num_computed_tokens", "parent")):
        cols = np.empty((len(reqs), len(names)), np.float64)
        fill.gather_attrs(reqs, names, None, cols.reshape(-1).data)
        ref = np.array([[float(getattr(r, x)) for x in names] for r in reqs])
        assert cols.tobytes() == ref.tobytes()
        whole = tuple(x for x in names if not x.endswith("_s"))  # (an int column refuses a float)
        ints = np.empty((len(reqs), len(whole)), np.int64)
        fill.gather_attrs(reqs, whole, ints.reshape(-1).data, None)
        assert ints.tolist() == [[getattr(r, x) for x in whole] for r in reqs]
    assert [fill.request_field(reqs[2], c) for c in fill.NUMERIC.values()] == [getattr(reqs[2], x) for x in fill.NUMERIC]
