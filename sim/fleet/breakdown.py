"""Where a candidate's time goes: the TTFT of each request in parts, and how busy each role is.

TTFT parts (seconds, per request; they sum to its TTFT)::

    queue         arrival -> first scheduled (on its prefill instance, for a P/D request)
    prefill       first scheduled -> prompt done (P/D: the prefill instance's one-token run;
                  unified: up to the first token, which the last prompt step samples)
    kv_wait       P/D: prompt done -> its decode blocks allocated (waiting for the decode
                  instance's next scheduling pass, and for free blocks to receive into when
                  its pool is full; the runtime's ``kv_wait_s`` minus ``transfer_s``)
    transfer      P/D: blocks allocated -> last byte landed (link latency + shared bandwidth)
    first_decode  P/D: landed -> first token (the decode step that computes the last prompt
                  token and samples; includes waiting for that step)
    api_server    the API server's ingress (queue + tokenization, before the engine sees it) and
                  the first token's egress (detokenize, stream; sim/frontend); 0 when none

Unified requests (and those a decode instance prefilled locally under llm-d's threshold) have
zero ``kv_wait``, ``transfer`` and ``first_decode``. Busy share: the share of the run's span in
which an instance was stepping, averaged over the instances of each role.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

PARTS = ("api_server", "queue", "prefill", "kv_wait", "transfer", "first_decode")
ROLES = ("unified", "prefill", "decode")


def ttft_parts(req: pd.DataFrame) -> pd.DataFrame:
    """One row per request of ``req`` (a request frame, or a cluster's with its P/D columns):
    ``ttft_<part>_s`` for each of :data:`PARTS` (NaN where the request has no first token)."""
    arr = req["arrival_s"].to_numpy(np.float64)
    fs = req["first_scheduled_s"].to_numpy(np.float64)
    ft = req["first_token_s"].to_numpy(np.float64)
    zero = np.where(np.isfinite(ft), 0.0, np.nan)
    api = zero.copy()
    if "engine_arrival_s" in req.columns:  # the front-end's share; the engine's times without it
        eng = req["engine_arrival_s"].to_numpy(np.float64)
        egress = np.nan_to_num(req["api_first_egress_s"].to_numpy(np.float64))
        api, arr, ft = api + (eng - arr) + egress, eng, ft - egress
    parts = {"api_server": api, "queue": fs - arr, "prefill": ft - fs, "kv_wait": zero, "transfer": zero.copy(),
             "first_decode": zero.copy()}
    if "prefill_done_s" in req.columns:
        done = req["prefill_done_s"].to_numpy(np.float64)
        wait = req["kv_wait_s"].to_numpy(np.float64)
        pd_ = np.isfinite(done) & np.isfinite(wait) & np.isfinite(ft)
        start = req["prefill_start_s"].to_numpy(np.float64)
        xfer = req["transfer_s"].to_numpy(np.float64)
        parts["queue"] = np.where(pd_, start - arr, parts["queue"])
        parts["prefill"] = np.where(pd_, done - start, parts["prefill"])
        parts["kv_wait"] = np.where(pd_, wait - xfer, parts["kv_wait"])
        parts["transfer"] = np.where(pd_, xfer, parts["transfer"])
        parts["first_decode"] = np.where(pd_, ft - (done + wait), parts["first_decode"])
    return pd.DataFrame({f"ttft_{k}_s": parts[k] for k in PARTS}, index=req.index)


def busy_shares(steps: pd.DataFrame, roles: list[str], span_s: float) -> dict[str, float]:
    """Per role: mean over its instances of (time stepping) / ``span_s``. ``steps`` carries an
    ``instance`` column (index into ``roles``) or is one instance's (``roles`` of length 1)."""
    if span_s <= 0:
        return {}
    inst = steps["instance"].to_numpy() if "instance" in steps.columns else np.zeros(len(steps), dtype=np.int64)
    busy = np.bincount(inst, weights=steps["duration_s"].to_numpy(np.float64), minlength=len(roles))
    out = {}
    for role in ROLES:
        ks = [k for k, r in enumerate(roles) if r == role]
        if ks:
            out[role] = float(np.mean(busy[ks]) / span_s)
    return out


def summary(req: pd.DataFrame, steps: pd.DataFrame, roles: list[str]) -> dict[str, float]:
    """Mean TTFT parts of the finished requests of ``req`` (they sum to the mean TTFT) and the
    busy share of each role (``busy_<role>``, NaN for roles the candidate has not)."""
    ok = req[req["status"] == "finished"]
    parts = ttft_parts(ok)
    out = {f"ttft_{k}": float(parts[f"ttft_{k}_s"].mean()) if len(ok) else math.nan for k in PARTS}
    out["ttft_mean"] = float(ok["ttft_s"].mean()) if len(ok) else math.nan
    t0 = float(req["arrival_s"].min()) if len(req) else 0.0
    steps = steps[steps["start_s"] >= t0] if len(steps) else steps   # the span of ``req`` (after warm-up)
    span = float((steps["start_s"] + steps["duration_s"]).max()) - t0 if len(steps) else 0.0
    busy = busy_shares(steps, roles, span) if len(steps) else {}
    for role in ROLES:
        out[f"busy_{role}"] = busy.get(role, math.nan)
    return out


def tail_shares(req: pd.DataFrame, tail: float = 0.9) -> tuple[float, float]:
    """(transfer, kv_wait): mean share of TTFT the slowest ``1 - tail`` of finished requests
    spend on the link and waiting for decode blocks (0, 0 without P/D requests)."""
    ok = req[req["status"] == "finished"]
    if not len(ok) or "transfer_s" not in ok.columns:
        return 0.0, 0.0
    ttft = ok["ttft_s"].to_numpy(np.float64)
    parts = ttft_parts(ok)
    good = np.isfinite(ttft) & (ttft > 0)
    if not good.any():
        return 0.0, 0.0
    slow = good & (ttft >= np.quantile(ttft[good], tail))
    x = parts["ttft_transfer_s"].to_numpy(np.float64)[slow] / ttft[slow]
    w = parts["ttft_kv_wait_s"].to_numpy(np.float64)[slow] / ttft[slow]
    return float(np.nanmean(x)), float(np.nanmean(w))
