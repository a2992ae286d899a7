"""The summary's step sums are sequential sums in step order, however the rows arrive.

The spec is the row in ``sim/io/step_fold.py``'s docstring, added left to right. The fold over
columns, and straight from a run's arrays must all give those floats bit
for bit; so must a streamed run and an in-memory one, whatever the chunk size, and the module
compiled (Cython, where it was built) and run as Python.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.fastforward.run_records import fold_piece, lay_out
from sim.io import step_fold
from sim.io.records import STEP_DTYPE, StepLog
from sim.io.results import MEM_CATS
from sim.io.step_fold import StepSums
from tests.helpers import a_run, as_python

B = 16


def random_records(rng: np.random.Generator, n: int) -> np.ndarray:
    a = np.zeros(n, STEP_DTYPE)
    a["duration_s"] = rng.random(n) * 0.05
    a["duration_s"][rng.random(n) < 0.1] = 0.0
    for c in MEM_CATS:
        a[c] = rng.integers(0, 5000, n)
    a["free_slots"] += 1  # a pool is never empty
    a["shared_blocks_saved"] = np.where(rng.random(n) < 0.5, rng.integers(0, 40, n), 0)
    return a


def by_hand(a: np.ndarray) -> tuple[list[float], list[int]]:
    """The spec: each row's terms added left to right, in Python floats."""
    acc, n, peak = [0.0] * 12, 0, 0
    for r in a.tolist():
        row = dict(zip(STEP_DTYPE.names, r, strict=True))
        cats = [row[c] for c in MEM_CATS]
        w, pool = row["duration_s"], float(sum(cats))
        acc[0] += w
        for i, c in enumerate(cats):
            share = c / pool
            acc[1 + i] += share * w
            acc[6 + i] += share
        held = cats[0] + cats[2] + cats[1]
        peak = max(peak, held)
        s = row["shared_blocks_saved"]
        acc[11] += s / (s + max(held / B, 1.0))
        n += 1
    return acc, [n, peak]


def folded(a: np.ndarray) -> StepSums:
    s = StepSums(B)
    s.add_records(a)
    return s


def test_the_sums_are_the_rows_added_left_to_right() -> None:
    a = random_records(np.random.default_rng(1), 500)
    s = folded(a)
    acc, ic = by_hand(a)
    assert s.acc.tolist() == acc and s.ic.tolist() == ic


def test_the_sums_are_the_same_bits_in_any_chunks() -> None:
    rng = np.random.default_rng(2)
    a = random_records(rng, 5000)
    ref = folded(a)
    chunked = StepSums(B)
    cuts = sorted(rng.choice(np.arange(1, 5000), 30, replace=False))
    for x, y in zip([0, *cuts], [*cuts, 5000], strict=True):
        chunked.add_records(a[x:y])
    assert chunked.acc.tobytes() == ref.acc.tobytes() and chunked.ic.tolist() == ref.ic.tolist()


@pytest.mark.parametrize("lag", [0, 1])
def test_a_run_folds_as_its_laid_out_records(lag: int) -> None:
    """The run's rows from its arrays, never laid out, give what its records give."""
    rr = a_run(lag, 40, 200, seed=lag)
    pieces = [(rr, 0, 17), (rr, 17, 150), (rr, 150, 200)]
    direct, laid = StepSums(B), StepSums(B)
    for p in pieces:
        fold_piece(p, direct)
    laid.add_records(lay_out(pieces))
    assert direct.acc.tobytes() == laid.acc.tobytes() and direct.ic.tolist() == laid.ic.tolist()
    with pytest.raises(ValueError, match="one block size"):
        fold_piece(pieces[0], StepSums(32))


def test_a_log_folds_its_rows_and_runs_in_step_order() -> None:
    """``StepLog.fold_into`` gives the sums of ``take()``'s array, straight from the rows and
    the runs' arrays (no record laid out)."""
    rng = np.random.default_rng(5)
    extra = [tuple(r) for r in random_records(rng, 30).tolist()]
    r1, r2 = a_run(1, 10, 60, seed=1), a_run(0, 90, 40, seed=2)

    def fill(log: StepLog) -> None:
        for t in extra[:4]:
            log.append(t)
        log.defer(lay_out, (r1, 0, 60), 60, fold_piece)
        for t in extra[4:20]:
            log.append(t)
        log.defer(lay_out, (r2, 5, 40), 35, fold_piece)
        log.defer(lay_out, (r2, 0, 5), 5)  # without a fold: laid out, then folded
        for t in extra[20:]:
            log.append(t)

    a, b = StepLog(), StepLog()
    fill(a)
    fill(b)
    via_take, via_fold = StepSums(B), StepSums(B)
    a.fold_into(via_fold)
    via_take.add_records(b.take())
    assert via_fold.acc.tobytes() == via_take.acc.tobytes() and via_fold.ic.tolist() == via_take.ic.tolist()
    assert len(a) == 0 and via_fold.n == 4 + 60 + 16 + 35 + 5 + 10


def test_a_summary_only_run_folds_its_runs_unlaid_and_matches_the_in_memory_summary(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.config import make_config
    from sim.engine.fastforward import run_records, runs
    from sim.io import stream
    from sim.run.simulate import simulate
    from tests.helpers import BUNDLED
    from workloads import load_trace

    calls: list[int] = []

    def counting(piece, sums):  # type: ignore[no-untyped-def]
        calls.append(piece[2] - piece[1])
        fold_piece(piece, sums)

    monkeypatch.setattr(runs, "fold_piece", counting)
    monkeypatch.setattr(stream, "CHUNK", 256)
    tr, cfg = load_trace(BUNDLED), make_config(max_model_len=8192)
    lean, full = simulate(cfg, tr, summary_only=True), simulate(cfg, tr)
    assert sum(calls) > 1000, "no run was folded straight from its arrays: proves nothing"
    assert lean.summary.memory == full.summary.memory
    assert (lean.summary.kv_held_slots_peak, lean.summary.sharing_saved_fraction) == \
        (full.summary.kv_held_slots_peak, full.summary.sharing_saved_fraction)
    assert run_records.fold_piece is fold_piece  # (the run module's name was patched, not this one)


def test_the_compiled_fold_gives_the_pythons_bits() -> None:
    """Compiled (Cython, no fused multiply-add) and as Python, the one source folds records
    and runs into the same bits (skipped where it was not compiled)."""
    py = as_python(step_fold)
    rng = np.random.default_rng(11)
    a = random_records(rng, 2000)
    rr = a_run(1, 10, 300, seed=4)
    got = []
    for mod in (step_fold, py):
        s = mod.StepSums(B)
        s.add_records(a[:700])
        s.add_records(a[700:2000])
        s.add_run(rr.ctx, rr.cum, rr.dts, 0, 300, 1, (3, 5, 1000, 900, 16))
        got.append((s.acc.tobytes(), s.ic.tolist()))
    assert got[0] == got[1]


def test_bad_arguments_raise() -> None:
    s = StepSums(B)
    with pytest.raises(ValueError, match="different lengths"):
        s.add_columns(np.zeros(3), [np.zeros(3, np.int64)] * 4 + [np.ones(2, np.int64)], np.zeros(3, np.int64))
    rr = a_run(0, 0, 20, seed=1)
    with pytest.raises(ValueError, match="out of the run"):
        s.add_run(rr.ctx, rr.cum, rr.dts, 0, 21, 0, (0, 5, 1000, 900, 16))
    assert s.n == 0
