"""Flat per-step records: one :class:`StepRecord` per engine step, one DataFrame at the end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from sim.io.fill import RowBuffer


class StepRecord(NamedTuple):
    """One engine step. The five ``*_slots`` memory categories sum to the KV pool."""

    step: int
    start_s: float
    duration_s: float
    num_running: int
    num_waiting: int
    prefill_tokens: int
    decode_tokens: int
    num_preempted: int
    free_blocks: int
    token_state_slots: int
    reserved_slots: int
    internal_frag_slots: int
    external_frag_slots: int
    free_slots: int
    shared_blocks_saved: int
    swap_out_blocks: int
    swap_in_blocks: int


STEP_COLUMNS = StepRecord._fields
StepRow = tuple[int, float, float, int, int, int, int, int, int, int, int, int, int, int, int, int, int]
"""A step record as the engine appends it: a plain tuple in :class:`StepRecord`'s field order
(one allocation a step, not two), written at once into the log's record buffer. A
``StepRecord`` is one too."""
_FLOAT = {"start_s", "duration_s"}
STEP_DTYPE = np.dtype([(c, np.float64 if c in _FLOAT else np.int64) for c in STEP_COLUMNS])
"""One step record as a numpy record (``frame`` and :mod:`sim.io.stream` convert with it)."""


def concat_steps(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate`` of STEP_DTYPE arrays, joined as raw bytes: concatenating record
    arrays promotes their fields pair by pair (about 30 us per part), a void view does not."""
    return np.concatenate([p.view(np.void) for p in parts]).view(STEP_DTYPE)


Fold = Callable[[Any, Any], None]
Deferred = tuple[Callable[[list[Any]], np.ndarray], Any, int, Fold | None, Callable[[Any], np.ndarray] | None]
"""A part held unconverted: ``(make, item, n, fold, ends_of)``; ``make(items)`` lays out the
``n`` records of each item, in order, as one STEP_DTYPE array; ``fold(item, sums)``, where given,
adds them to a :class:`~sim.io.step_fold.StepSums` without laying them out, and ``ends_of(item)``
gives their step ends likewise (see :meth:`StepLog.defer` and :meth:`StepLog.fold_into`)."""


def record_ends(a: np.ndarray) -> np.ndarray:
    """The step ends (start + duration) of STEP_DTYPE records."""
    return a["start_s"] + a["duration_s"]


class StepLog:
    """The step records of one replica, in step order: rows appended as tuples (one call on
    the hot path, written at once into a record buffer: :class:`~sim.io.fill.RowBuffer`) and,
    from fast-forward's runs of quiet steps, deferred parts (:meth:`defer`).

    A run's records go in after the rows appended before it (``cuts``). Deferred parts are laid
    out when the records are read (:meth:`take`, :meth:`frame`), all of one ``make`` in one call
    (a run's records cost about 16 numpy calls one by one). A summary-only reader folds them
    instead (:meth:`fold_into`), laying out nothing. ``FOLD_AT`` buffered rows at most are held
    before everything is merged into one array."""

    __slots__ = ("append", "cuts", "in_parts", "parts", "rows")
    FOLD_AT = 1 << 16

    def __init__(self) -> None:
        self.rows = RowBuffer(STEP_DTYPE)
        self.append: Callable[[StepRow], None] = self.rows.append
        self.parts: list[np.ndarray | Deferred] = []   # in order, each after rows[:cut]
        self.cuts: list[int] = []
        self.in_parts = 0

    def __len__(self) -> int:
        return self.in_parts + len(self.rows)

    def defer(self, make: Callable[[list[Any]], np.ndarray], item: Any, n: int, fold: Fold | None = None,
              ends_of: Callable[[Any], np.ndarray] | None = None) -> None:
        """Append the ``n`` records ``make([item])`` would give (after every record so far),
        laid out only when the log is read, with every other deferred item of the same ``make``
        (one call for all); ``fold(item, sums)`` folds them into summary sums without them."""
        self.cuts.append(len(self.rows))
        self.parts.append((make, item, n, fold, ends_of))
        self.in_parts += n
        if len(self.rows) >= self.FOLD_AT:
            self._merge()

    def _laid_out(self) -> list[np.ndarray]:
        """The parts as arrays, the deferred ones laid out: one ``make`` call per distinct ``make``."""
        parts = self.parts
        out: list[np.ndarray | None] = [None if isinstance(p, tuple) else p for p in parts]
        todo = [(i, p) for i, p in enumerate(parts) if isinstance(p, tuple)]
        for make in dict.fromkeys(p[0] for _, p in todo):
            mine = [(i, p) for i, p in todo if p[0] is make]
            laid, start = make([p[1] for _, p in mine]), 0
            for i, (_, _, n, _, _) in mine:
                out[i] = laid[start:start + n]
                start += n
            if start != len(laid):
                raise AssertionError(f"deferred parts hold {start} records, laid out {len(laid)}")
        return [x for x in out if x is not None]

    def _merge(self) -> np.ndarray | None:
        """Every record held as one array, kept as the log's only part (None: none)."""
        rows, parts = self.rows, self._laid_out()
        if not rows:
            if not parts:
                return None
            if len(parts) == 1:
                self.parts = [parts[0]]  # (laid out)
                return parts[0]
        if not parts:
            a = rows.records(0, len(rows))
        else:  # one array, the rows written straight into their places between the parts
            a = np.empty(len(rows) + sum(len(p) for p in parts), STEP_DTYPE)
            av, pos, prev = a.view(np.void), 0, 0  # (void views: copied as bytes, not field by field)
            for cut, part in zip(self.cuts, parts, strict=True):
                if cut > prev:
                    av[pos:pos + cut - prev] = rows.view(prev, cut).view(np.void)
                    pos, prev = pos + cut - prev, cut
                av[pos:pos + len(part)] = part.view(np.void)
                pos += len(part)
            if prev < len(rows):
                av[pos:] = rows.view(prev, len(rows)).view(np.void)
        rows.clear()  # in place: the engine keeps its bound append
        self.parts, self.cuts, self.in_parts = [a], [0], len(a)
        return a

    def take(self) -> np.ndarray | None:
        """Every record held, as one array (None: none), and empty the log."""
        a = self._merge()
        self.parts, self.cuts, self.in_parts = [], [], 0
        return a

    def fold_into(self, sums: Any, ends: list[np.ndarray] | None = None) -> None:
        """Fold every record held into ``sums`` (a :class:`~sim.io.step_fold.StepSums`), in step
        order, and empty the log: rows and runs straight from what the log holds, without laying
        out a run's record (the same sums as :meth:`take`'s array: sequential, in step order).
        ``ends``: also append the step ends (start + duration, in step order), for the API
        server's egress."""
        rows, prev = self.rows, 0
        for cut, part in zip(self.cuts, self.parts, strict=True):
            if cut > prev:
                self._fold_rows(sums, prev, cut, ends)
                prev = cut
            if not isinstance(part, tuple):
                sums.add_records(part)
                if ends is not None:
                    ends.append(record_ends(part))
            elif part[3] is not None and (ends is None or part[4] is not None):
                part[3](part[1], sums)
                if ends is not None and part[4] is not None:  # (as the condition above: for mypy)
                    ends.append(part[4](part[1]))
            else:  # laid out: no fold, or its ends cannot be had without the records
                a = part[0]([part[1]])
                sums.add_records(a)
                if ends is not None:
                    ends.append(record_ends(a))
        if prev < len(rows):
            self._fold_rows(sums, prev, len(rows), ends)
        rows.clear()  # in place: the engine keeps its bound append
        self.parts, self.cuts, self.in_parts = [], [], 0

    def _fold_rows(self, sums: Any, a: int, b: int, ends: list[np.ndarray] | None) -> None:
        recs = self.rows.view(a, b)  # (read before the log is cleared)
        sums.add_records(recs)
        if ends is not None:
            ends.append(record_ends(recs))

    def records(self) -> np.ndarray:
        """Every record held, as one STEP_DTYPE array (the log keeps holding them)."""
        a = self._merge()
        return np.empty(0, STEP_DTYPE) if a is None else a

    def frame(self) -> pd.DataFrame:
        a = self.records()
        return pd.DataFrame({name: a[name] for name in STEP_COLUMNS})


def stacked_frame(parts: list[np.ndarray], **extra: np.ndarray) -> pd.DataFrame:
    """Several replicas' records as one frame: ``instance`` (the part's index), the record
    fields, then ``extra``'s columns (one value a record, in the parts' order). One copy into
    the frame, not a frame a replica and a concatenation of them."""
    a = concat_steps(parts) if parts else np.empty(0, STEP_DTYPE)
    cols = {"instance": np.repeat(np.arange(len(parts), dtype=np.int64), [len(p) for p in parts])}
    cols.update((name, a[name]) for name in STEP_COLUMNS)
    cols.update(extra)
    return pd.DataFrame(cols)
