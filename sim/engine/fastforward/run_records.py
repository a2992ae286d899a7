"""The step records of runs of quiet steps (:mod:`sim.engine.fastforward.runs`), laid out many
runs at a time.

A run knows its records when it is laid out, but they are needed only when the step log is
read (a drain, a frame): :meth:`QuietRuns._commit` hands the log ``(RunRows, a, b)`` (rows
``a .. b-1`` of a run) through :meth:`~sim.io.records.StepLog.defer`, and :func:`lay_out` turns
every such piece the log holds into one STEP_DTYPE array: one ``(N, 17)`` int64 table whose
constant columns come from one ``np.repeat`` of a row per piece, the others as int arithmetic
on the pieces' joined columns, the two float columns written through a float view::

    column        step j of a run (j = 1 .. H; row j - 1)
    step          first + j - 1
    free_blocks   F0 - cum_j                     (cum_j: blocks taken by steps 1 .. j)
    token slots   ctx_j - comp0 - shared B       (comp0: async records lag one token a decoder)
    internal      cum_j B - ctx_j + (usable - F0 + shared) B + comp0
    free_slots    F0 B - cum_j B
    start, dur    T[j-1], dt_j                   (async: step j-1's, the first the window's)

Each value is the one the window's quiet steps write one at a time (sim/io/records.py): the
ints are exact, the floats copied. Laid out one run at a time this took about 16 numpy calls a
run, 8 % of the instructions of a day on 32 replicas (one run a request).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from sim.io.records import STEP_DTYPE


class RunShape(NamedTuple):
    """What a run's records hold constant: the window's counts and the pool's when it starts."""

    first_step: int     # the engine's step number of the run's first step
    lag: int            # 1: async scheduling (records lag a step), 0: sync
    block_size: int
    free0: int          # free blocks before the run
    usable: int         # usable blocks of the pool
    nulls: int          # the null block's slots (external fragmentation)
    decoders: int
    num_waiting: int
    num_running: int
    shared: int         # blocks saved by sharing (constant along a run)


class RunRows(NamedTuple):
    """A laid-out run's record columns that vary (row ``j - 1``: run step ``j``).

    ``ends`` and ``dts`` hold one slot before the run's own values, the step in flight's (its
    start and duration), since an async record is the step before's::

        ends   p_start  T[0]  T[1]  ...  T[H]     (T[0]: the window's time; T[j]: step j ends)
        dts    p_dt     dt_1  dt_2  ...  dt_H
        sync record j:  start T[j-1] = ends[j],    dur dt_j = dts[j]
        async record j: start T[j-2] = ends[j-1],  dur dt_{j-1} = dts[j-1]   (j = 1: p_start, p_dt)
    """

    shape: RunShape
    ends: np.ndarray
    dts: np.ndarray
    ctx: np.ndarray     # context tokens of the decoders after each step
    cum: np.ndarray     # blocks taken by the run's steps so far

    def starts(self, a: int, b: int) -> np.ndarray:
        """start_s of rows ``a .. b-1``."""
        k = 1 - self.shape.lag
        return self.ends[a + k:b + k]

    def durations(self, a: int, b: int) -> np.ndarray:
        """duration_s of rows ``a .. b-1``."""
        k = 1 - self.shape.lag
        return self.dts[a + k:b + k]


def lay_out(pieces: list[tuple[RunRows, int, int]]) -> np.ndarray:
    """The records of rows ``a .. b-1`` of each ``(rows, a, b)``, in order, as one STEP_DTYPE
    array (module docstring)."""
    B = pieces[0][0].shape.block_size
    lens, consts = [], []
    for rr, a, b in pieces:
        sh = rr.shape
        if sh.block_size != B:
            raise ValueError("runs of one step log have one block size")
        comp0 = sh.decoders if sh.lag else 0
        lens.append(b - a)
        consts.append((sh.first_step + a, 0, 0, sh.num_running, sh.num_waiting, 0, sh.decoders, 0, sh.free0,
                       -(comp0 + sh.shared * B), 0, (sh.usable - sh.free0 + sh.shared) * B + comp0, sh.nulls,
                       sh.free0 * B, sh.shared, 0, 0))
    rec = np.repeat(np.array(consts, np.int64), lens, axis=0)
    n = len(rec)
    if len(pieces) == 1:
        rec[:, 0] += np.arange(n)
    else:  # the row's place in its piece
        firsts = np.zeros(len(lens), np.int64)
        np.cumsum(lens[:-1], out=firsts[1:])
        rec[:, 0] += np.arange(n) - np.repeat(firsts, lens)
    ctx = np.concatenate([rr.ctx[a:b] for rr, a, b in pieces])
    cum = np.concatenate([rr.cum[a:b] for rr, a, b in pieces])
    rec[:, 8] -= cum                                            # free_blocks
    rec[:, 9] += ctx                                            # token_state_slots
    cum *= B
    rec[:, 11] += cum                                           # internal_frag_slots
    rec[:, 11] -= ctx
    rec[:, 13] -= cum                                           # free_slots
    fv = rec.view(np.float64)
    fv[:, 1] = np.concatenate([rr.starts(a, b) for rr, a, b in pieces])
    fv[:, 2] = np.concatenate([rr.durations(a, b) for rr, a, b in pieces])
    return rec.view(STEP_DTYPE)[:, 0]


def fold_piece(piece: tuple[RunRows, int, int], sums: Any) -> None:
    """Fold rows ``a .. b-1`` of a run into summary sums (:class:`~sim.io.step_fold.StepSums`)
    without laying them out: the values :func:`lay_out` would give, row by row."""
    rr, a, b = piece
    sh = rr.shape
    if sh.block_size != sums.block_size:
        raise ValueError("runs of one step log have one block size")
    comp0 = sh.decoders if sh.lag else 0
    sums.add_run(rr.ctx, rr.cum, rr.dts, a, b, sh.lag, (comp0, sh.shared, sh.usable, sh.free0, sh.nulls))


def run_ends(piece: tuple[RunRows, int, int]) -> np.ndarray:
    """The step ends (start + duration) of rows ``a .. b-1``, as :func:`lay_out`'s records give them."""
    rr, a, b = piece
    return rr.starts(a, b) + rr.durations(a, b)
