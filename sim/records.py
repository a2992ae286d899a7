"""Flat per-step records, kept column-wise (one Python list per column) for speed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

STEP_COLUMNS = (
    "step", "start_s", "duration_s", "num_running", "num_waiting", "prefill_tokens",
    "decode_tokens", "num_preempted", "free_blocks",
    "token_state_slots", "reserved_slots", "internal_frag_slots", "external_frag_slots", "free_slots",
    "shared_blocks_saved", "swap_out_blocks", "swap_in_blocks",
)


class StepLog:
    """One tuple per step in STEP_COLUMNS order (a single append on the hot path)."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def row(self, *values: Any) -> None:
        self.rows.append(values)

    def __len__(self) -> int:
        return len(self.rows)

    def frame(self) -> pd.DataFrame:
        data = {}
        cols = list(zip(*self.rows, strict=True)) if self.rows else [() for _ in STEP_COLUMNS]
        for name, col in zip(STEP_COLUMNS, cols, strict=True):
            dtype = np.float64 if name in ("start_s", "duration_s") else np.int64
            data[name] = np.asarray(col, dtype=dtype)
        return pd.DataFrame(data)
