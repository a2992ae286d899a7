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
