"""Flat per-step records: one :class:`StepRecord` per engine step, one DataFrame at the end."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd


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
record_from_tuple = partial(tuple.__new__, StepRecord)
"""``StepRecord`` from a tuple in field order, without the keyword machinery (the hot path)."""
_FLOAT = {"start_s", "duration_s"}
STEP_DTYPE = np.dtype([(c, np.float64 if c in _FLOAT else np.int64) for c in STEP_COLUMNS])
"""One step record as a numpy record (``frame`` and :mod:`sim.io.stream` convert with it)."""


class StepLog:
    """The step records of one replica, in step order (a single append on the hot path)."""

    __slots__ = ("append", "rows")

    def __init__(self) -> None:
        self.rows: list[StepRecord] = []
        self.append = self.rows.append

    def __len__(self) -> int:
        return len(self.rows)

    def frame(self) -> pd.DataFrame:
        a = np.fromiter(self.rows, dtype=STEP_DTYPE, count=len(self.rows))  # one C pass over the tuples
        return pd.DataFrame({name: a[name] for name in STEP_COLUMNS})
