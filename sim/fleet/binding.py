"""Which limit binds a candidate first, read off a run just above its capacity.

From the step records (weighted by step duration) we measure the share of time the queue is
non-empty *because of* each limit, plus the preemption rate:

=====================  =================================================================
``kv-memory``          preemptions, or a queue while the KV pool is (nearly) full
``max_num_seqs``       a queue while ``num_running == max_num_seqs`` (the batch cap)
``decode-compute``     otherwise, when TPOT (or e2e alone) is the SLO that fails: big
                       batches inflate every decode step
``prefill-queueing``   otherwise: TTFT fails because prompts wait for step token budget
=====================  =================================================================

The thresholds are shares of queued time; they are deliberately coarse (this is a label for a
table, not a measurement), and the raw shares are reported next to the label.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

KV_FREE_SHARE = 0.05      # "full" = less than 5 % of the pool free
KV_PREEMPT_PER_1K = 5.0   # preemptions per 1,000 requests that make KV the binding limit
SHARE = 0.25              # share of queued time that makes a cap the binding limit
SLOT_COLS = ("token_state_slots", "reserved_slots", "internal_frag_slots", "external_frag_slots",
             "free_slots")
BINDINGS = ("kv-memory", "max_num_seqs", "decode-compute", "prefill-queueing")


@dataclass(frozen=True, slots=True)
class Diagnostics:
    """Time shares (0..1, over the run) and counters behind the binding label."""

    queued_share: float       # time with requests waiting
    kv_full_share: float      # ... and the KV pool nearly full
    seq_cap_share: float      # ... and the batch at max_num_seqs
    token_cap_share: float    # ... and the step's token budget used up
    preempt_per_1k: float
    failing: tuple[str, ...]  # SLO metrics that failed (ttft, tpot, e2e, joint...)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def diagnose(steps: pd.DataFrame, num_requests: int, preemptions: int, max_num_seqs: int,
             max_num_batched_tokens: int, failing: tuple[str, ...] = ()) -> Diagnostics:
    if len(steps) == 0:
        return Diagnostics(0.0, 0.0, 0.0, 0.0, 0.0, failing)
    w = steps["duration_s"].to_numpy(np.float64)
    total = float(w.sum()) or 1.0
    queued = steps["num_waiting"].to_numpy() > 0
    pool = steps[list(SLOT_COLS)].sum(axis=1).to_numpy(np.float64)
    free = steps["free_slots"].to_numpy(np.float64) / np.maximum(pool, 1.0)
    tokens = (steps["prefill_tokens"] + steps["decode_tokens"]).to_numpy()

    def share(mask: np.ndarray) -> float:
        return float(w[mask].sum()) / total

    return Diagnostics(
        queued_share=share(queued),
        kv_full_share=share(queued & (free < KV_FREE_SHARE)),
        seq_cap_share=share(queued & (steps["num_running"].to_numpy() >= max_num_seqs)),
        token_cap_share=share(queued & (tokens >= max_num_batched_tokens)),
        preempt_per_1k=1000.0 * preemptions / max(num_requests, 1),
        failing=failing,
    )


def classify(d: Diagnostics) -> str:
    """The binding-constraint label (see the module docstring)."""
    if d.preempt_per_1k >= KV_PREEMPT_PER_1K or d.kv_full_share >= SHARE:
        return "kv-memory"
    if d.seq_cap_share >= SHARE:
        return "max_num_seqs"
    metrics = {f.split("_")[0] for f in d.failing}
    if "tpot" in metrics or ("e2e" in metrics and "ttft" not in metrics):
        return "decode-compute"
    return "prefill-queueing"
