"""Flat result tables: one row per request, and the time-averaged memory shares of the steps."""

from __future__ import annotations

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


def request_frame(reqs: list[Request]) -> pd.DataFrame:
    def col(name: str, dtype: Any) -> np.ndarray:
        return np.fromiter(map(attrgetter(name), reqs), dtype=dtype, count=len(reqs))

    def neg_nan(a: np.ndarray) -> np.ndarray:
        return np.where(a < 0, np.nan, a)

    status = np.array(["finished" if r.status == Status.FINISHED else
                       "rejected" if r.status == Status.REJECTED else "unfinished" for r in reqs], dtype=object)
    fs, ft, fn = (neg_nan(col(c, np.float64)) for c in ("first_scheduled_s", "first_token_s", "finish_s"))
    arr = col("arrival_s", np.float64)
    out_t = col("output_tokens", np.int64)
    tpot = np.where(out_t > 1, (fn - ft) / np.maximum(out_t - 1, 1), np.nan)
    frame = pd.DataFrame({
        "request_id": [r.request_id for r in reqs], "arrival_s": arr,
        "prompt_tokens": col("prompt_tokens", np.int64), "output_tokens": out_t,
        "status": status,
        "finish_reason": pd.Categorical(
            ["rejected" if r.status == Status.REJECTED else None if r.status != Status.FINISHED else
             "length" if r.length_capped else "stop" for r in reqs], categories=FINISH_REASONS),
        # a category of sim.io.rejects.CODES and the reason with its numbers; NA when not rejected
        "reject_reason": pd.Categorical([r.reject_reason or None for r in reqs], categories=CODES),
        "reject_detail": pd.Series([r.reject_detail or None for r in reqs], dtype="str"),
        "first_scheduled_s": fs, "first_token_s": ft, "finish_s": fn,
        "first_scheduled_step": col("first_scheduled_step", np.int64),
        "finish_step": col("finish_step", np.int64),
        "num_preemptions": col("num_preemptions", np.int64),
        "prefix_hit_tokens": col("prefix_hit_tokens", np.int64),
        "ttft_s": ft - arr, "tpot_s": tpot, "e2e_s": fn - arr,
        "parent_id": pd.Series([reqs[r.parent].request_id if r.parent >= 0 else None for r in reqs], dtype="str"),
    })
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
