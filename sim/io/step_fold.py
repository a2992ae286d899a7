"""The summary's step figures, folded row by row in step order: time-weighted memory shares,
the held-slots peak and the shared-block fraction (:class:`~sim.io.stream.StepStats`).

Every sum is sequential: each row's terms are added one after another to running totals, in
step order. A total is therefore the same float however the rows arrive -- one frame, chunks of
any size, or runs of quiet steps folded straight from their arrays without their records ever
being laid out (:meth:`StepSums.add_run`; a day on 32 replicas holds 210 M such rows) -- so a
streamed run and an in-memory one give the same summary bit for bit. (Until 2026-12-04 the
shares were numpy's pairwise sums per chunk, which depended on the chunk size.)

Two implementations give the same bits: :func:`fold_numpy`, with ``np.add.accumulate`` (the
reference), and the compiled ``_step_fold.c`` (optional; built by ``pip install`` where a C
compiler is, without fused multiply-add). The compiled one runs when it was built and
``KVSIM_PURE_PYTHON`` is unset.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import Any

import numpy as np

from sim.compiled import compiled
from sim.io.results import MEM_CATS

N_CATS = len(MEM_CATS)  # token_state, reserved, internal_frag, external_frag, free


COMPILED = compiled("sim.io._step_fold")  # read by each new StepSums (tests set it to compare both)


def fold_numpy(w: np.ndarray, cats: Sequence[np.ndarray], saved: np.ndarray, acc: np.ndarray, ic: np.ndarray,
               block_size: int) -> None:
    """Fold rows into ``acc`` (w, wshare x5, share x5, saved) and ``ic`` (n, held peak), in
    place: the reference (module docstring; ``_step_fold.c`` spells out the row)."""
    n = len(w)
    if not n:
        return

    def seq(i: int, x: np.ndarray) -> None:  # acc[i] + x[0] + x[1] + ..., left to right
        buf = np.empty(n + 1)
        buf[0], buf[1:] = acc[i], x
        acc[i] = np.add.accumulate(buf)[-1]

    pool = reduce(np.add, cats).astype(np.float64)  # exact int sums, then one conversion
    seq(0, w)
    for c, cat in enumerate(cats):
        share = cat / pool
        seq(1 + c, share * w)
        seq(1 + N_CATS + c, share)
    held = cats[0] + cats[2] + cats[1]  # token + internal + reserved
    ic[1] = max(int(ic[1]), int(held.max()))
    seq(11, saved / (saved + np.maximum(held / block_size, 1.0)))
    ic[0] += n


class StepSums:
    """Running totals of the step figures (module docstring)."""

    __slots__ = ("_c", "acc", "block_size", "ic")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.acc = np.zeros(12)
        self.ic = np.zeros(2, np.int64)
        self._c = COMPILED

    @property
    def n(self) -> int:
        return int(self.ic[0])

    def add_columns(self, w: np.ndarray, cats: Sequence[np.ndarray], saved: np.ndarray) -> None:
        """Rows given as columns: durations, the five slot categories, blocks saved."""
        if self._c is not None:
            self._c.fold_columns(w, *cats, saved, self.acc, self.ic, self.block_size)
        else:
            fold_numpy(w, cats, saved, self.acc, self.ic, self.block_size)

    def add_records(self, a: Any) -> None:
        """Rows of a STEP_DTYPE array or a frame with the step columns."""
        def col(name: str, dtype: Any) -> np.ndarray:
            return np.asarray(a[name], dtype=dtype)

        self.add_columns(col("duration_s", np.float64), [col(c, np.int64) for c in MEM_CATS],
                         col("shared_blocks_saved", np.int64))

    @property
    def compiled(self) -> bool:
        """Whether rows can be folded from tuples and runs' arrays (else from records only)."""
        return self._c is not None

    def add_tuples(self, rows: list[Any], start: int, end: int) -> None:
        """``rows[start:end]``, tuples in StepRecord's field order (compiled only: see :attr:`compiled`)."""
        assert self._c is not None
        self._c.fold_tuples(rows, start, end, self.acc, self.ic, self.block_size)

    def add_run(self, ctx: np.ndarray, cum: np.ndarray, dts: np.ndarray, a: int, b: int, lag: int,
                consts: tuple[int, int, int, int, int]) -> None:
        """Rows ``a .. b-1`` of a run of quiet steps straight from its arrays (``consts``:
        comp0, shared, usable, free0, nulls; see :mod:`sim.engine.fastforward.run_records`;
        compiled only: see :attr:`compiled`)."""
        assert self._c is not None
        comp0, shared, usable, free0, nulls = consts
        self._c.fold_run(ctx, cum, dts, a, b, lag, self.block_size, comp0, shared, usable, free0, nulls,
                         self.acc, self.ic)

    def totals(self) -> tuple[float, list[float], list[float], int, float]:
        """w, wshare per category, share per category, held peak, saved (sum)."""
        acc = self.acc.tolist()
        return acc[0], acc[1:1 + N_CATS], acc[1 + N_CATS:1 + 2 * N_CATS], int(self.ic[1]), acc[11]
