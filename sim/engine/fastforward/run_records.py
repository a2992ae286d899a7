"""The step records of a run of quiet steps, laid out at once (:mod:`sim.engine.fastforward.runs`).

STEP_DTYPE is 17 eight-byte fields, so a run's records are an ``(H, 17)`` int64 table with the
two float columns written through a float view: the constant columns in one broadcast, the
others as int arithmetic on the run's offsets and the blocks it takes::

    column        step j of the run (j = 1 .. H)
    step          first + j - 1
    free_blocks   F0 - cum_j                     (cum_j: blocks taken by steps 1 .. j)
    token slots   ctx_j - comp0 - shared B       (comp0: async records lag one token a decoder)
    internal      cum_j B - ctx_j + (usable - F0 + shared) B + comp0
    free_slots    free_blocks B
    start, dur    T[j-1], dt_j                   (async: step j-1's, the first the window's)

Each value is the one the window's quiet steps write one at a time (sim/io/records.py).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.io.records import STEP_COLUMNS, STEP_DTYPE


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


def run_records(sh: RunShape, o: np.ndarray, T: np.ndarray, p_start: float, p_dt: float, dt: np.ndarray,
                ctx: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """The records of run steps ``o`` (1 .. H) as a STEP_DTYPE array (module docstring)."""
    H, B, F0, shared = len(o), sh.block_size, sh.free0, sh.shared
    comp0 = sh.decoders if sh.lag else 0
    rec = np.empty((H, len(STEP_COLUMNS)), np.int64)
    rec[:] = (0, 0, 0, sh.num_running, sh.num_waiting, 0, sh.decoders, 0, 0, 0, 0, 0, sh.nulls, 0, shared, 0, 0)
    np.add(o, sh.first_step - 1, out=rec[:, 0])                 # step
    free = np.subtract(F0, cum, out=rec[:, 8])                  # free_blocks
    np.subtract(ctx, comp0 + shared * B, out=rec[:, 9])         # token_state_slots
    internal = np.multiply(cum, B, out=rec[:, 11])              # internal_frag_slots
    internal -= ctx
    internal += (sh.usable - F0 + shared) * B + comp0
    np.multiply(free, B, out=rec[:, 13])                        # free_slots
    fv = rec.view(np.float64)
    if sh.lag:  # the record of step j is step j-1's (it lands as j is launched); step 0: the window's
        fv[0, 1], fv[0, 2] = p_start, p_dt
        fv[1:, 1], fv[1:, 2] = T[:H - 1], dt[:-1]
    else:
        fv[:, 1], fv[:, 2] = T[:H], dt
    return rec.view(STEP_DTYPE)[:, 0]
