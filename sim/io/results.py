"""Flat result tables: one row per request, and the time-averaged memory shares of the steps."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd

from sim.io.fill import gather_attrs
from sim.io.rejects import CODES
from sim.request import Request, Status

REQUEST_COLUMNS = (
    "request_id", "arrival_s", "prompt_tokens", "output_tokens", "status", "finish_reason", "reject_reason", "reject_detail",
    "first_scheduled_s", "first_token_s", "finish_s", "first_scheduled_step", "finish_step",
    "num_preemptions", "prefix_hit_tokens", "ttft_s", "tpot_s", "e2e_s", "parent_id",
)

#: vLLM's finish reasons: "stop" (the trace's output length reached), "length" (cut at
#: max_model_len: ``output_tokens`` is then max_model_len - prompt), "rejected"; NA while unfinished
FINISH_REASONS = ("stop", "length", "rejected")

MEM_CATS = ("token_state_slots", "reserved_slots", "internal_frag_slots", "external_frag_slots", "free_slots")


def _column(reqs: Sequence[Request], name: str, dtype: Any) -> np.ndarray:
    """The attribute ``name`` of every request, as one numpy column."""
    return np.fromiter(map(attrgetter(name), reqs), dtype=dtype, count=len(reqs))


def attr_columns(reqs: Sequence[Request], names: tuple[str, ...], dtype: Any) -> dict[str, np.ndarray]:
    """The attributes ``names`` of every request, one contiguous numpy column each of ``dtype``
    (int64 or float64), read in one pass (:func:`sim.io.fill.gather_attrs`)."""
    floats = np.dtype(dtype) == np.float64
    if not floats and np.dtype(dtype) != np.int64:
        raise TypeError(f"attr_columns: int64 or float64 columns, not {np.dtype(dtype)}")
    rows = np.empty((len(reqs), len(names)), np.float64 if floats else np.int64)
    flat = rows.reshape(-1).data
    gather_attrs(reqs if type(reqs) is list else list(reqs), tuple(names), None if floats else flat,
                 flat if floats else None)
    return dict(zip(names, rows.T.copy(), strict=True))


_INTS = ("status", "prompt_tokens", "output_tokens", "first_scheduled_step", "finish_step", "num_preemptions",
         "prefix_hit_tokens")
_FLOATS = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s")


def _summary_columns(reqs: Sequence[Request], ints: dict[str, np.ndarray]) -> dict[str, Any]:
    """:func:`request_columns`' columns, in its order (``ints``: the integer attributes)."""
    n = len(reqs)
    f = attr_columns(reqs, _FLOATS, np.float64)
    st, arr, out_t = ints["status"], f["arrival_s"], ints["output_tokens"]
    status = np.where(st == Status.FINISHED, "finished", np.where(st == Status.REJECTED, "rejected", "unfinished"))
    fs, ft, fn = (np.where(f[c] < 0, np.nan, f[c]) for c in ("first_scheduled_s", "first_token_s", "finish_s"))
    capped = _column(reqs, "length_capped", bool)
    # FINISH_REASONS' codes: stop 0, length 1, rejected 2; NA (-1) while unfinished
    finish = np.where(st == Status.REJECTED, 2, np.where(st != Status.FINISHED, -1, np.where(capped, 1, 0)))
    rejected = bool((st == Status.REJECTED).any())
    return {
        "arrival_s": arr, "prompt_tokens": ints["prompt_tokens"], "output_tokens": out_t,
        "status": status.astype(object),
        "finish_reason": pd.Categorical.from_codes(finish, categories=FINISH_REASONS),
        "reject_reason": pd.Categorical([r.reject_reason or None for r in reqs], categories=CODES) if rejected
        else pd.Categorical.from_codes(np.full(n, -1), categories=CODES),
        "first_scheduled_s": fs, "first_token_s": ft, "finish_s": fn,
        "ttft_s": ft - arr, "tpot_s": np.where(out_t > 1, (fn - ft) / np.maximum(out_t - 1, 1), np.nan),
        "e2e_s": fn - arr,
    }


def request_columns(reqs: Sequence[Request]) -> pd.DataFrame:
    """The request columns the run summary reads (no ids, reasons' details or parents), as numpy
    columns; :func:`request_frame` adds the others (the same values and order)."""
    return pd.DataFrame(_summary_columns(reqs, attr_columns(reqs, ("status", "prompt_tokens", "output_tokens"), np.int64)))


def request_frame(reqs: Sequence[Request]) -> pd.DataFrame:
    """One row per request, in uid order: :func:`request_columns` and the ids, the steps, the
    counts and the details (one frame, built in :data:`REQUEST_COLUMNS`' order)."""
    ints = attr_columns(reqs, _INTS, np.int64)
    cols = _summary_columns(reqs, ints)
    cols.update((name, ints[name]) for name in ("first_scheduled_step", "finish_step", "num_preemptions",
                                                   "prefix_hit_tokens"))
    cols["request_id"] = [r.request_id for r in reqs]
    cols["reject_detail"] = pd.Series([r.reject_detail or None for r in reqs], dtype="str")
    cols["parent_id"] = pd.Series([reqs[r.parent].request_id if r.parent >= 0 else None for r in reqs], dtype="str")
    return pd.DataFrame({name: cols[name] for name in REQUEST_COLUMNS})


def memory_breakdown(steps: pd.DataFrame) -> dict[str, float]:
    """Time-averaged share of the KV pool per category (weights = step durations)."""
    if len(steps) == 0:
        return {c.removesuffix("_slots"): 0.0 for c in MEM_CATS}
    w = steps["duration_s"].to_numpy()
    pool = steps[list(MEM_CATS)].sum(axis=1).to_numpy().astype(float)
    out = {}
    for c in MEM_CATS:
        share = steps[c].to_numpy() / pool
        out[c.removesuffix("_slots")] = float(np.average(share, weights=w)) if w.sum() > 0 else float(share.mean())
    return out
