"""Which limit binds a candidate first, read off a run just above its capacity.

From the step records (weighted by step duration) and the request records we measure what the
requests that miss the SLO are waiting for; the first rule that holds names the limit:

========================  ===================================================================
``decode-kv-receive``     (xPyD) >= 5 % of the pulls waited for free decode blocks to receive
                          into, the slowest requests spend more of their TTFT waiting for them
                          than on the link, and the decode KV pool really is short (< 25 % free
                          for >= 25 % of the decode instances' time)
``seq-cap``               (xPyD) the pulls waited as above but the decode pool had room: the
                          decode batch sat at ``max_num_seqs`` >= 25 % of the time (a pull that
                          cannot join the running batch waits just the same)
``link-bandwidth``        (xPyD) the slowest 10 % of requests spend >= 25 % of their TTFT
                          moving KV over the prefill -> decode link
``kv-memory``             preemptions (>= 5 per 1k requests), or requests queued while the KV
                          pool is nearly full (< 5 % free) for >= 25 % of the time
``seq-cap``               requests queued while the batch is at ``max_num_seqs`` >= 25 % of the time
``prefill-interference``  TPOT (or e2e alone) fails and running requests spend most of their
                          time (>= 50 %) in steps that also carry prompt tokens, or >= a third
                          of the slowest 10 %'s TPOT is above what a pure decode step takes per
                          token (the rest is the time decodes wait for prompt chunks)
``decode-steps``          TPOT (or e2e alone) fails and most of that time is in pure decode
                          steps: the step time of the batch itself (memory bandwidth, compute)
``token-budget``          TTFT fails and requests queued while steps used the whole
                          ``max_num_batched_tokens`` >= 25 % of the time
``prefill-compute``       TTFT fails and the slowest 10 % of requests spend most of their TTFT
                          (>= 50 %) in their own prefill, not waiting: prompts are too long
                          for this GPU x TP
``queueing``              TTFT fails and the slowest requests mostly wait to be scheduled
                          although no cap binds: every step is slow (the GPU is saturated)
========================  ===================================================================

The xPyD rules come first (the decode pool that cannot take a pull shows as a full KV pool
too; the link is the more specific name). A pull "waits for blocks" whenever the decode
scheduler does not take it at once, which a full running batch causes as often as a full pool:
so ``decode-kv-receive`` needs the pool itself to be short, and names ``seq-cap`` otherwise.

The thresholds are deliberately coarse (this is a label for a table, not a measurement); the
shares behind it are kept next to it (``capacity_probes``, :class:`Diagnostics`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

KV_FREE_SHARE = 0.05      # "full" = less than 5 % of the pool free
KV_SHORT_FREE = 0.25      # xPyD decode pool "short": less than 25 % free (a prompt's KV is large)
KV_BLOCKED_SHARE = 0.05   # xPyD: share of pulls that waited for decode blocks
KV_PREEMPT_PER_1K = 5.0   # preemptions per 1,000 requests that make KV the binding limit
SHARE = 0.25              # share of queued time that makes a cap the binding limit
MOSTLY = 0.5              # "most of the time"
STALL = 1 / 3             # share of the tail TPOT spent on prompt chunks that names them
TAIL = 0.9                # the slowest 10 % of requests by TTFT
SLOT_COLS = ("token_state_slots", "reserved_slots", "internal_frag_slots", "external_frag_slots",
             "free_slots")

#: label -> (what it means, what would relax it); plans print both next to the labels they use
LABELS: dict[str, tuple[str, str]] = {
    "decode-kv-receive": ("prefilled requests wait for free decode blocks to receive their KV into "
                          "(vLLM's WAITING_FOR_REMOTE_KVS with no room)",
                          "more decode instances or decode KV memory (a higher --gpu-memory-utilization, more TP "
                          "or a larger GPU for the decode role), or a lower prefill:decode ratio"),
    "link-bandwidth": ("TTFT misses because moving the prompt's KV from prefill to decode takes too long",
                       "a faster link (NVLink within a node, a faster NIC), more TP (more lanes), an FP8 KV cache, "
                       "or a unified fleet"),
    "kv-memory": ("requests are preempted or wait for KV blocks",
                  "more KV memory: a higher --gpu-memory-utilization, a larger GPU or more TP"),
    "seq-cap": ("requests wait while the running batch is at --max-num-seqs (the KV pool has room)",
                "a higher --max-num-seqs (of the decode role for xPyD)"),
    "prefill-interference": ("TPOT misses because decodes share their steps with prompt chunks",
                             "a lower --max-num-batched-tokens (smaller prefill chunks per step)"),
    "decode-steps": ("TPOT misses because the decode steps of the batch are slow",
                     "a GPU with more memory bandwidth or more TP, or a lower --max-num-seqs"),
    "token-budget": ("prompts wait for room in the step's token budget", "a higher --max-num-batched-tokens"),
    "prefill-compute": ("TTFT misses because the prompts themselves take too long",
                        "more TP or a faster GPU (prefill is compute-bound), or a looser TTFT SLO"),
    "queueing": ("TTFT misses because requests wait behind slow steps while no cap binds",
                 "more TP or a faster GPU"),
}
HELPS: dict[str, str] = {k: v[1] for k, v in LABELS.items()}
PD_BINDINGS = ("decode-kv-receive", "link-bandwidth")   # from a P/D run's pulls (sim/fleet/xpyd_plan.py)
BINDINGS = tuple(k for k in HELPS if k not in PD_BINDINGS)   # from any run's step and request records


@dataclass(frozen=True, slots=True)
class Diagnostics:
    """Time shares (0..1, over the run) and counters behind the binding label."""

    queued_share: float       # time with requests waiting
    kv_full_share: float      # ... and the KV pool nearly full
    seq_cap_share: float      # ... and the batch at max_num_seqs
    token_cap_share: float    # ... and the step's token budget used up
    preempt_per_1k: float
    failing: tuple[str, ...]  # SLO targets that failed (ttft_p99<=1s, tpot_..., joint>=...)
    prefill_step_share: float = 0.0   # running requests' time spent in steps carrying prompt tokens
    tail_wait_share: float = 0.0      # slowest 10 % by TTFT: share of their TTFT spent waiting
    kv_blocked_share: float = 0.0     # xPyD: share of pulls that waited for free decode blocks
    transfer_share: float = 0.0       # xPyD: slowest 10 %: share of their TTFT on the link
    recv_wait_share: float = 0.0      # xPyD: slowest 10 %: share waiting for blocks to receive into
    prefill_tpot_share: float = 0.0   # slowest 10 % by TPOT: share of their TPOT above pure decode steps
    decode_kv_short_share: float = 0.0  # xPyD: decode instances' time with < 25 % of their pool free
    decode_seq_full_share: float = 0.0  # xPyD: decode instances' time with the batch at max_num_seqs

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tail_wait_share(req: pd.DataFrame | None) -> float:
    """Mean share of TTFT the slowest 10 % of requests spent before they were first scheduled."""
    if req is None or not len(req):
        return 0.0
    ttft = (req["first_token_s"] - req["arrival_s"]).to_numpy(np.float64)
    wait = (req["first_scheduled_s"] - req["arrival_s"]).to_numpy(np.float64)
    ok = np.isfinite(ttft) & np.isfinite(wait) & (ttft > 0)
    if not ok.any():
        return 0.0
    ttft, wait = ttft[ok], wait[ok]
    slow = ttft >= np.quantile(ttft, TAIL)
    return float(np.mean(wait[slow] / ttft[slow]))


def diagnose(steps: pd.DataFrame, num_requests: int, preemptions: int, max_num_seqs: int,
             max_num_batched_tokens: int, failing: tuple[str, ...] = (),
             requests: pd.DataFrame | None = None) -> Diagnostics:
    if len(steps) == 0:
        return Diagnostics(0.0, 0.0, 0.0, 0.0, 0.0, failing, 0.0, _tail_wait_share(requests))
    w = steps["duration_s"].to_numpy(np.float64)
    total = float(w.sum()) or 1.0
    queued = steps["num_waiting"].to_numpy() > 0
    pool = steps[list(SLOT_COLS)].sum(axis=1).to_numpy(np.float64)
    free = steps["free_slots"].to_numpy(np.float64) / np.maximum(pool, 1.0)
    prefill = steps["prefill_tokens"].to_numpy()
    tokens = prefill + steps["decode_tokens"].to_numpy()
    running = w * steps["num_running"].to_numpy(np.float64)   # request-seconds spent in each step

    def share(mask: np.ndarray) -> float:
        return float(w[mask].sum()) / total

    return Diagnostics(
        queued_share=share(queued),
        kv_full_share=share(queued & (free < KV_FREE_SHARE)),
        seq_cap_share=share(queued & (steps["num_running"].to_numpy() >= max_num_seqs)),
        token_cap_share=share(queued & (tokens >= max_num_batched_tokens)),
        preempt_per_1k=1000.0 * preemptions / max(num_requests, 1),
        failing=failing,
        prefill_step_share=float(running[prefill > 0].sum() / running.sum()) if running.sum() else 0.0,
        tail_wait_share=_tail_wait_share(requests),
        prefill_tpot_share=_prefill_tpot_share(steps, requests),
    )


def _prefill_tpot_share(steps: pd.DataFrame, req: pd.DataFrame | None) -> float:
    """Share of the p90 TPOT above the per-token time of pure decode steps, when some decode
    steps also carried prompt chunks (the part of TPOT a smaller chunk would remove); else 0."""
    if req is None or "tpot_s" not in req.columns:
        return 0.0
    dec = steps["decode_tokens"].to_numpy(np.float64)
    pure = (steps["prefill_tokens"].to_numpy() == 0) & (dec > 0)
    tpot = req["tpot_s"].dropna().to_numpy(np.float64)
    if not pure.any() or pure.sum() == (dec > 0).sum() or not len(tpot):
        return 0.0
    per_token = float((steps["duration_s"].to_numpy(np.float64) * dec)[pure].sum() / dec[pure].sum())
    tail = float(np.quantile(tpot, TAIL))
    return max(0.0, 1.0 - per_token / tail) if tail > 0 else 0.0


def decode_pressure(steps: pd.DataFrame, max_num_seqs: int) -> tuple[float, float]:
    """(share of time the pool had < 25 % free, share at ``max_num_seqs``) over ``steps`` (a
    decode role's steps, weighted by duration): which of the two kept pulls waiting."""
    if len(steps) == 0:
        return 0.0, 0.0
    w = steps["duration_s"].to_numpy(np.float64)
    total = float(w.sum()) or 1.0
    pool = steps[list(SLOT_COLS)].sum(axis=1).to_numpy(np.float64)
    free = steps["free_slots"].to_numpy(np.float64) / np.maximum(pool, 1.0)
    full = steps["num_running"].to_numpy() >= max_num_seqs
    return float(w[free < KV_SHORT_FREE].sum()) / total, float(w[full].sum()) / total


def classify(d: Diagnostics) -> str:
    """The binding-constraint label (see the module docstring)."""
    if d.kv_blocked_share >= KV_BLOCKED_SHARE and d.recv_wait_share > 0 and d.recv_wait_share >= d.transfer_share:
        if d.decode_kv_short_share >= SHARE:
            return "decode-kv-receive"
        if d.decode_seq_full_share >= SHARE:
            return "seq-cap"
    if d.transfer_share >= SHARE:
        return "link-bandwidth"
    if d.preempt_per_1k >= KV_PREEMPT_PER_1K or d.kv_full_share >= SHARE:
        return "kv-memory"
    if d.seq_cap_share >= SHARE:
        return "seq-cap"
    metrics = {f.split("_")[0] for f in d.failing}
    if "tpot" in metrics or ("e2e" in metrics and "ttft" not in metrics):
        mixed = d.prefill_step_share >= MOSTLY or d.prefill_tpot_share >= STALL
        return "prefill-interference" if mixed else "decode-steps"
    if d.token_cap_share >= SHARE:
        return "token-budget"
    return "queueing" if d.tail_wait_share >= MOSTLY else "prefill-compute"
