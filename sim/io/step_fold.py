# cython: boundscheck=False, wraparound=False, cdivision=True
"""The summary's step figures, folded row by row in step order: time-weighted memory shares,
the held-slots peak and the shared-block fraction (:class:`~sim.io.stream.StepStats`).

Every sum is sequential: each row's terms are added one after another to running totals, in
step order. A total is therefore the same float however the rows arrive -- one frame, chunks of
any size, or runs of quiet steps folded straight from their arrays without their records
ever being laid out (:meth:`StepSums.add_run`; a day on 32 replicas holds 210 M such rows) --
so a streamed run and an in-memory one give the same summary bit for bit. A row (duration w;
slots token, reserved, internal, external, free; blocks saved s) adds, in this order
(:func:`fold_row`)::

    pool = float(token + reserved + internal + external + free)
    acc[0] += w;  for each category c: share = c / pool; acc[1+c] += share * w; acc[6+c] += share
    held = token + internal + reserved;  held_peak = max(held_peak, held)
    acc[11] += s / (s + max(held / B, 1))
    n += 1

Compiled by Cython where a C compiler is (``step_fold.pxd``: typed memoryviews, C ints and
doubles, no fused multiply-add; ``setup.py``), else it runs as this Python: the same floats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sim.io.results import MEM_CATS

N_CATS = len(MEM_CATS)  # token_state, reserved, internal_frag, external_frag, free


def fold_row(acc: np.ndarray, ic: np.ndarray, B: float, w: float, tok: int, res: int, inl: int, ext: int,
             fre: int, saved: int) -> None:
    """Add one row to ``acc`` (w, wshare x5, share x5, saved) and ``ic`` (n, held peak)."""
    pool = float(tok + res + inl + ext + fre)
    fold_shares(acc, ic, B, w, tok / pool, res / pool, inl / pool, ext / pool, fre / pool, tok + inl + res, saved)


def fold_shares(acc: np.ndarray, ic: np.ndarray, B: float, w: float, s0: float, s1: float, s2: float, s3: float,
                s4: float, held: int, saved: int) -> None:
    """:func:`fold_row` from the row's five shares of the pool and its held slots."""
    acc[0] = acc[0] + w
    acc[1] = acc[1] + s0 * w
    acc[6] = acc[6] + s0
    acc[2] = acc[2] + s1 * w
    acc[7] = acc[7] + s1
    acc[3] = acc[3] + s2 * w
    acc[8] = acc[8] + s2
    acc[4] = acc[4] + s3 * w
    acc[9] = acc[9] + s3
    acc[5] = acc[5] + s4 * w
    acc[10] = acc[10] + s4
    if held > ic[1]:
        ic[1] = held
    hb = held / B
    if hb < 1.0:
        hb = 1.0
    sv = float(saved)
    acc[11] = acc[11] + sv / (sv + hb)
    ic[0] += 1


def fold_columns(w: np.ndarray, tok: np.ndarray, res: np.ndarray, inl: np.ndarray, ext: np.ndarray,
                 fre: np.ndarray, saved: np.ndarray, acc: np.ndarray, ic: np.ndarray, block_size: int) -> None:
    """Rows from seven equally long 1-D columns (strided views of a record array will do)."""
    n = len(w)
    if not len(tok) == len(res) == len(inl) == len(ext) == len(fre) == len(saved) == n:
        raise ValueError("step fold: columns of different lengths")
    B = float(block_size)
    for i in range(n):
        fold_row(acc, ic, B, w[i], tok[i], res[i], inl[i], ext[i], fre[i], saved[i])


def fold_run(ctx: np.ndarray, cum: np.ndarray, dts: np.ndarray, a: int, b: int, lag: int, block_size: int,
             comp0: int, shared: int, usable: int, free0: int, nulls: int, acc: np.ndarray, ic: np.ndarray) -> None:
    """Rows ``a .. b-1`` of a run of quiet steps, from its arrays, as
    :func:`sim.engine.fastforward.run_records.lay_out` would lay them out (see that module)."""
    if a < 0 or b < a or b > len(ctx) or b > len(cum) or b + 1 - lag > len(dts) or lag not in (0, 1):
        raise ValueError("step fold: rows out of the run")
    B = float(block_size)
    tok0 = -(comp0 + shared * block_size)
    int0 = (usable - free0 + shared) * block_size + comp0
    free_slots = free0 * block_size
    # the pool (the five categories' sum), reserved slots (0) and external ones (nulls) are the same
    # on every row of a run: their shares are divided once, the floats fold_row divides each row
    pool = float(tok0 + int0 + nulls + free_slots)
    s_res, s_ext = 0 / pool, nulls / pool
    for r in range(a, b):
        c = ctx[r]
        cb = cum[r] * block_size
        tok, inl = tok0 + c, int0 + cb - c
        fold_shares(acc, ic, B, dts[r + 1 - lag], tok / pool, s_res, inl / pool, s_ext, (free_slots - cb) / pool,
                    tok + inl, shared)


class StepSums:
    """Running totals of the step figures (module docstring)."""

    __slots__ = ("acc", "block_size", "ic")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.acc = np.zeros(12)
        self.ic = np.zeros(2, np.int64)

    @property
    def n(self) -> int:
        return int(self.ic[0])

    def add_columns(self, w: np.ndarray, cats: Sequence[np.ndarray], saved: np.ndarray) -> None:
        """Rows given as columns: durations, the five slot categories, blocks saved."""
        tok, res, inl, ext, fre = cats
        fold_columns(w, tok, res, inl, ext, fre, saved, self.acc, self.ic, self.block_size)

    def add_records(self, a: Any) -> None:
        """Rows of a STEP_DTYPE array or a frame with the step columns."""
        def col(name: str, dtype: Any) -> np.ndarray:
            return np.asarray(a[name], dtype=dtype)

        self.add_columns(col("duration_s", np.float64), [col(c, np.int64) for c in MEM_CATS],
                         col("shared_blocks_saved", np.int64))

    def add_run(self, ctx: np.ndarray, cum: np.ndarray, dts: np.ndarray, a: int, b: int, lag: int,
                consts: tuple[int, int, int, int, int]) -> None:
        """Rows ``a .. b-1`` of a run of quiet steps straight from its arrays (``consts``:
        comp0, shared, usable, free0, nulls; see :mod:`sim.engine.fastforward.run_records`)."""
        comp0, shared, usable, free0, nulls = consts
        fold_run(ctx, cum, dts, a, b, lag, self.block_size, comp0, shared, usable, free0, nulls, self.acc, self.ic)

    def totals(self) -> tuple[float, list[float], list[float], int, float]:
        """w, wshare per category, share per category, held peak, saved (sum)."""
        acc = self.acc.tolist()
        return acc[0], acc[1:1 + N_CATS], acc[1 + N_CATS:1 + 2 * N_CATS], int(self.ic[1]), acc[11]
