"""A run's step records are laid out when the log is read, many runs in one call: each row
must be what a quiet step writes one at a time (the module docstring's formulas)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.fastforward.run_records import RunRows, lay_out
from sim.io.records import STEP_COLUMNS, StepLog, StepRecord
from tests.helpers import a_run


def by_hand(rr: RunRows, j: int) -> tuple[float | int, ...]:
    """Row ``j`` (0-based) of a run, field by field as the docstring's table says."""
    sh, B = rr.shape, rr.shape.block_size
    comp0 = sh.decoders if sh.lag else 0
    cum, ctx, free = int(rr.cum[j]), int(rr.ctx[j]), sh.free0 - int(rr.cum[j])
    T, dt = rr.ends[1:], rr.dts[1:]
    start, dur = (T[j - 1], dt[j - 1]) if sh.lag and j else (6.5, 0.5) if sh.lag else (T[j], dt[j])
    return (sh.first_step + j, float(start), float(dur), sh.num_running, sh.num_waiting, 0,
            sh.decoders, 0, free, ctx - comp0 - sh.shared * B, 0,
            cum * B - ctx + (sh.usable - sh.free0 + sh.shared) * B + comp0, sh.nulls, free * B, sh.shared, 0, 0)


@pytest.mark.parametrize("lag", [0, 1])
def test_each_row_is_the_quiet_steps_record(lag: int) -> None:
    rr = a_run(lag, 40, 30, seed=lag)
    rows = lay_out([(rr, 0, 30)])
    assert [tuple(r) for r in rows.tolist()] == [by_hand(rr, j) for j in range(30)]
    T, dt = rr.ends[1:], rr.dts[1:]
    if lag:  # async: a record is the step before's; the first, the step in flight's
        assert (rows["start_s"][0], rows["duration_s"][0]) == (6.5, 0.5)
        assert (rows["start_s"][5], rows["duration_s"][5]) == (T[4], dt[4])
    else:
        assert (rows["start_s"][0], rows["duration_s"][0]) == (T[0], dt[0]) == (7.0, dt[0])


def test_pieces_of_several_runs_lay_out_in_one_call_as_they_would_one_by_one() -> None:
    r1, r2 = a_run(1, 10, 50, seed=1), a_run(0, 70, 20, seed=2)
    pieces = [(r1, 0, 7), (r1, 7, 31), (r2, 3, 20), (r1, 31, 32)]
    together = lay_out(pieces)
    apart = np.concatenate([lay_out([p]).view(np.void) for p in pieces])
    assert together.view(np.void).tobytes() == apart.tobytes()
    assert [tuple(r) for r in together.tolist()] == \
        [by_hand(rr, j) for rr, a, b in pieces for j in range(a, b)]


def test_a_step_log_lays_deferred_runs_out_in_step_order_among_its_tuples() -> None:
    first, second = a_run(0, 2, 6, seed=3), a_run(1, 7, 6, seed=5)
    log = StepLog()
    for i in range(2):
        log.append(StepRecord(i, float(i), 1.0, *([0] * (len(STEP_COLUMNS) - 3))))
    log.defer(lay_out, (first, 0, 4), 4)                   # steps 2-5
    log.append(StepRecord(6, 9.0, 1.0, *([0] * (len(STEP_COLUMNS) - 3))))
    log.defer(lay_out, (second, 0, 2), 2)                  # steps 7-8
    assert len(log) == 9
    assert log.take()["step"].tolist() == list(range(9))
    assert len(log) == 0


def test_a_deferred_count_that_does_not_match_its_records_is_an_error() -> None:
    log = StepLog()
    log.defer(lay_out, (a_run(0, 0, 5, seed=4), 0, 5), 4)
    with pytest.raises(AssertionError, match="hold 4 records, laid out 5"):
        log.take()
