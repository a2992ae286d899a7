"""The markdown tables of reports/disaggregation.md, rendered from :func:`sim.fleet.xpyd.study`.

Kept apart from the study so the report's tables are regenerated, not retyped: each row names
the knob setting that won the candidate's tuned search and the goodput the same candidate had
at the untuned (vLLM default) setting, so a verdict that tuning changed shows in the table.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

HEAD = ("candidate", "SLO", "tuned knobs (batched tokens / seqs)", "goodput (req/s)", "at defaults (req/s)",
        "requests per GPU-dollar", "binding above", "TTFT p90", "TPOT p90", "transfer p90", "KV wait p90")


def _g(v: Any, unit: str = "", scale: float = 1.0) -> str:
    """``v`` to 3 significant figures with ``unit``, "-" when missing."""
    try:
        f = float(v) * scale
    except (TypeError, ValueError):
        return "-"
    if not math.isfinite(f):
        return "-"
    return f"{f:,.0f}{unit}" if abs(f) >= 1000 else f"{f:.3g}{unit}"


def _goodput(v: Any, lowest: float, top: bool = False) -> str:
    """A goodput, "< lowest" when the candidate failed at the grid's lowest rate, ">= v" when
    it passed the whole grid (``top``)."""
    if float(v) <= 0:
        return f"< {lowest:.3g} (fails at the lowest rate)"
    return f">= {_g(v)} (whole grid)" if top else _g(v)


def _knobs(r: pd.Series, untuned: dict[str, int]) -> str:
    mine = {k: int(r[k]) for k in untuned}
    tag = " (defaults)" if mine == untuned else ""
    return f"{mine['max_num_batched_tokens']} / {mine['max_num_seqs']}{tag}"


def markdown(best: pd.DataFrame, untuned: dict[str, int]) -> str:
    """One table row per (candidate, SLO) of ``best`` (:func:`sim.fleet.xpyd.best`)."""
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for _, r in best.iterrows():
        low, top = float(r["lowest_qps"]), r["binding"] == "none in grid"
        at = float(r["goodput_untuned_qps"])       # passed the whole grid too when it ties a winner that did
        cells = [str(r["candidate"]), str(r["slo"]), _knobs(r, untuned), _goodput(r["goodput_qps"], low, top),
                 _goodput(at, low, top and at == r["goodput_qps"]) if math.isfinite(at) else "-",
                 f"{float(r['requests_per_gpu_dollar']):,.0f}", str(r["binding"]),
                 _g(r.get("ttft_p90_s"), " s"), *(_g(r.get(c), " ms", 1e3) for c in
                                                  ("tpot_p90_s", "transfer_p90_s", "kv_wait_p90_s"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
