"""How far a stack's extrapolated bands reach: its error where its own fit never went.

The ``vllm-v1`` stages (inference-perf, a cycled prompt set) computed little prefill: most of
each prompt came from vLLM's prefix cache. A run of long uncached prompts is therefore
extrapolated, and its band should say what is known there. LLM-Inference-Bench measured vLLM
0.5.4-0.6.1 on H100 with prefill-bound static batches (16 prompts of 1,024 tokens, one output
token): GPU-bound steps, where the older engine's CPU overheads hardly count, so the ``vllm-v1``
stack's error on them is a fair cross-source check of its prefill time. The extrapolated edges
of each band are widened to cover those rows' measured / predicted - 1 (never narrowed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calibration import static_bench as sb


def cross_ratios(stack: str, gpu: str = "h100", regime: str = "prefill-bound") -> np.ndarray:
    """measured / predicted - 1 of LLM-Inference-Bench's ``regime`` rows on ``gpu``, timed by ``stack``."""
    rows = sb.bench_rows()
    rows = rows[(rows["gpu"] == gpu) & (rows["regime"] == regime) & ~rows["moe"]]
    d = sb.with_features(rows, stack)
    d = d[np.isfinite(d["sim_s"])]
    return (d["y_s"] / d["sim_s"] - 1).to_numpy(dtype=float)


def widen(band: dict[str, Any], ratio: np.ndarray, what: str) -> dict[str, Any]:
    """``band`` with its extrapolated edges reaching ``ratio``'s extremes, and its basis saying so."""
    if not len(ratio):
        return band
    lo, hi = float(ratio.min()), float(ratio.max())
    out = dict(band)
    out["optimistic_extrapolated"] = round(min(band["optimistic_extrapolated"], lo, 0.0), 4)
    out["pessimistic_extrapolated"] = round(max(band["pessimistic_extrapolated"], hi, 0.0), 4)
    out["basis"] = (f"{band['basis']}; and to cover {what} (n={len(ratio)}: measured/predicted - 1 "
                    f"{100 * lo:+.1f}% .. {100 * hi:+.1f}%)")
    return out
