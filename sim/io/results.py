"""Flat result tables: one row per request, and the time-averaged memory shares of the steps."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd

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


def request_columns(reqs: Sequence[Request]) -> pd.DataFrame:
    """The request columns the run summary reads (no ids, reasons' details or parents), as numpy
    columns; :func:`request_frame` adds the others (the same values and order)."""
    n = len(reqs)

    def col(name: str, dtype: Any) -> np.ndarray:
        return _column(reqs, name, dtype)

    def neg_nan(a: np.ndarray) -> np.ndarray:
        return np.where(a < 0, np.nan, a)

    st = col("status", np.int64)
    status = np.where(st == Status.FINISHED, "finished", np.where(st == Status.REJECTED, "rejected", "unfinished"))
    fs, ft, fn = (neg_nan(col(c, np.float64)) for c in ("first_scheduled_s", "first_token_s", "finish_s"))
    arr, out_t = col("arrival_s", np.float64), col("output_tokens", np.int64)
    capped = col("length_capped", bool)
    finish = np.where(st == Status.REJECTED, "rejected",
                      np.where(st != Status.FINISHED, np.array(None, dtype=object), np.where(capped, "length", "stop")))
    return pd.DataFrame({
        "arrival_s": arr, "prompt_tokens": col("prompt_tokens", np.int64), "output_tokens": out_t,
        "status": status.astype(object),
        "finish_reason": pd.Categorical(finish, categories=FINISH_REASONS),
        "reject_reason": pd.Categorical([r.reject_reason or None for r in reqs] if (st == Status.REJECTED).any()
                                        else [None] * n, categories=CODES),
        "first_scheduled_s": fs, "first_token_s": ft, "finish_s": fn,
        "ttft_s": ft - arr, "tpot_s": np.where(out_t > 1, (fn - ft) / np.maximum(out_t - 1, 1), np.nan),
        "e2e_s": fn - arr,
    })


def request_frame(reqs: Sequence[Request]) -> pd.DataFrame:
    """One row per request, in uid order: :func:`request_columns` and the ids, the steps, the
    counts and the details."""
    frame = request_columns(reqs)
    for name in ("first_scheduled_step", "finish_step", "num_preemptions", "prefix_hit_tokens"):
        frame[name] = _column(reqs, name, np.int64)
    frame["request_id"] = [r.request_id for r in reqs]
    frame["reject_detail"] = pd.Series([r.reject_detail or None for r in reqs], dtype="str")
    frame["parent_id"] = pd.Series([reqs[r.parent].request_id if r.parent >= 0 else None for r in reqs], dtype="str")
    return frame[list(REQUEST_COLUMNS)]


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
