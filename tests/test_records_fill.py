"""Step records from tuples, compiled (``sim/io/_records.c``), are ``np.fromiter``'s bytes.

Skipped, with the reason, where the extension was not built.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.io import records
from sim.io.records import STEP_DTYPE, StepLog, StepRecord, from_tuples
from tests.helpers import require_built


@pytest.fixture
def compiled() -> None:
    require_built(records.FILL, "sim/io/_records.c")


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


def test_the_compiled_fill_writes_fromiters_bytes(compiled: None) -> None:
    rows = random_rows(np.random.default_rng(0), 3000)
    ref = np.fromiter(rows, dtype=STEP_DTYPE, count=len(rows))
    assert from_tuples(rows).tobytes() == ref.tobytes()
    assert from_tuples([]).shape == (0,)


def test_a_log_frames_the_same_rows_either_way(compiled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = random_rows(np.random.default_rng(1), 500)
    frames = []
    for fill in (records.FILL, None):
        monkeypatch.setattr(records, "FILL", fill)
        log = StepLog()
        for r in rows:
            log.append(r)
        frames.append(log.frame())
    assert frames[0].equals(frames[1])


def test_bad_rows_raise_instead_of_writing_garbage(compiled: None) -> None:
    good = random_rows(np.random.default_rng(2), 3)
    with pytest.raises(TypeError, match="tuple of 17 fields"):
        from_tuples([*good, (1, 2.0)])
    with pytest.raises(TypeError):
        from_tuples([*good, StepRecord(*(["x"] + [0] * 16))])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="need"):
        records.FILL(good, np.empty(10, np.int64))  # type: ignore[misc]


def test_the_compiled_fill_writes_a_slice_of_the_rows_into_a_slice_of_an_array(compiled: None) -> None:
    rows = random_rows(np.random.default_rng(3), 50)
    out = np.zeros(60, STEP_DTYPE)
    from_tuples(rows, 10, 40, out[5:35])
    ref = np.fromiter(rows[10:40], dtype=STEP_DTYPE, count=30)
    assert out[5:35].tobytes() == ref.tobytes()
    assert not out[:5].view(np.int64).any() and not out[35:].view(np.int64).any(), "nothing written outside"
    with pytest.raises(IndexError, match="rows 10:60 of 50"):
        records.FILL(rows, np.empty(50 * 17, np.int64), 10, 60)  # type: ignore[misc]
    with pytest.raises(ValueError, match="need"):
        records.FILL(rows, np.empty(17, np.int64), 0, 2)  # type: ignore[misc]


@pytest.mark.parametrize("fill", ["compiled", "python"])
def test_a_log_with_runs_between_its_tuples_frames_them_in_order(compiled: None, monkeypatch: pytest.MonkeyPatch,
                                                                 fill: str) -> None:
    """Tuples, a deferred part, more tuples, two parts, a last tuple: one array, every record in
    its place (the tuples written straight between the parts), either fill."""
    from sim.io.records import concat_steps

    if fill == "python":
        monkeypatch.setattr(records, "FILL", None)
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
