"""The regime a serving stack was fitted in, and whether a run stayed inside it.

A stack fitted end to end (``calibration/era_fit.py``) is only "fitted" where its stages' replays
went: the GPU, the TP degrees, dense or MoE models, and the ranges of batch size (requests in
flight over time), context (prompt + output tokens of a request) and prompt tokens computed (less
a prefix-cache hit) those replays covered (their 5th to 95th percentiles, the ``regime:`` block
of ``calibration/data/stacks.yaml``). After a run, :func:`check_run` compares the run's own 95th percentiles against the fitted upper edges
and says what was extrapolated and how far. Only the upper edge is checked: below it a step is
dominated by reading the weights once, which the kernel basis measures directly; above it the
token and attention terms grow past anything the stack's coefficients were fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

QUANTITIES = ("batch", "context", "prompt")


@dataclass(frozen=True, slots=True)
class Regime:
    """Where the stack's end-to-end fit holds: (p5, p95) of each quantity over the fit stages."""

    gpus: tuple[str, ...]
    tps: tuple[int, ...]
    moe: bool                               # whether any fitted model was MoE
    batch: tuple[float, float]
    context: tuple[float, float]
    prompt: tuple[float, float]
    basis: str = ""

    def upper(self, name: str) -> float:
        return float(getattr(self, name)[1])


def regime_of(d: Any) -> Regime | None:
    """A ``regime:`` block of a stack entry (None when the entry has none)."""
    if d is None:
        return None

    def span(k: str) -> tuple[float, float]:
        v = d[k]
        return float(v["p5"]), float(v["p95"])

    return Regime(tuple(str(g) for g in d["gpu"]), tuple(int(t) for t in d["tp"]), bool(d.get("moe", False)),
                  span("batch"), span("context"), span("prompt"), str(d.get("basis", "")))


@dataclass(frozen=True, slots=True)
class RegimeCheck:
    """A run against a fitted regime: ``outside`` names each quantity past its fitted edge."""

    outside: tuple[str, ...]
    observed: tuple[tuple[str, float], ...]     # (quantity, the run's p95)

    @property
    def inside(self) -> bool:
        return not self.outside

    def line(self, r: Regime) -> str:
        if self.outside:
            return "outside the fitted regime: " + "; ".join(self.outside)
        seen = ", ".join(f"{k} p95 {v:,.0f} <= {r.upper(k):,.0f}" for k, v in self.observed)
        return f"inside the fitted regime ({', '.join(r.gpus)}, TP {', '.join(map(str, r.tps))}, {seen})"


def p95(x: np.ndarray) -> float:
    return float(np.percentile(x, 95)) if len(x) else 0.0


def check_run(r: Regime, quantities: dict[str, np.ndarray], *, gpu: str | None = None, tp: int | None = None,
              moe: bool = False) -> RegimeCheck:
    """Compare a run's p95s, and its GPU, TP and architecture where given, with the fitted regime."""
    out = []
    if gpu is not None and gpu not in r.gpus:
        out.append(f"GPU {gpu} vs fitted {', '.join(r.gpus)}")
    if tp is not None and tp not in r.tps:
        out.append(f"TP {tp} vs fitted {', '.join(map(str, r.tps))}")
    if moe and not r.moe:
        out.append("MoE model vs fitted dense models only")
    seen = []
    for k in QUANTITIES:
        if k not in quantities or not len(quantities[k]):
            continue
        v = p95(quantities[k])
        seen.append((k, v))
        if v > r.upper(k):
            out.append(f"{k} p95 {v:,.0f} vs fitted <= {r.upper(k):,.0f} ({v / max(r.upper(k), 1e-9):.1f}x)")
    return RegimeCheck(tuple(out), tuple(seen))


def running(req: pd.DataFrame, samples: int = 4096) -> np.ndarray:
    """The batch: requests in flight (first scheduled -> finished) at ``samples`` evenly spaced
    times over the run, zeros left out. Read from the requests table alone, so a streamed or
    summary-only run (no steps table) reports the same figure as one that keeps every step."""
    if "first_scheduled_s" not in req or "finish_s" not in req:
        return np.zeros(0)
    s, f = req["first_scheduled_s"].to_numpy(dtype=float), req["finish_s"].to_numpy(dtype=float)
    ok = np.isfinite(s) & np.isfinite(f)
    if not ok.any():
        return np.zeros(0)
    t = np.r_[s[ok], f[ok]]
    d = np.r_[np.ones(int(ok.sum())), -np.ones(int(ok.sum()))]
    order = np.argsort(t, kind="stable")
    t, level = t[order], np.cumsum(d[order])
    n = level[np.searchsorted(t, np.linspace(t[0], t[-1], samples), "right") - 1]
    return n[n > 0]


def run_quantities(req: pd.DataFrame) -> dict[str, np.ndarray]:
    """The regime's quantities of one run: the batch over time, and per served request its context
    and its prompt tokens computed (a prefix-cache hit is not prefill work: a stack fitted on
    cached prompts has not seen long prefills, and a run of uncached ones must say so)."""
    done = req[req["status"] == "finished"] if "status" in req else req
    prompt = done["prompt_tokens"].to_numpy(dtype=float)
    hit = done["prefix_hit_tokens"].to_numpy(dtype=float) if "prefix_hit_tokens" in done else 0.0
    return {"batch": running(req), "context": prompt + done["output_tokens"].to_numpy(dtype=float),
            "prompt": prompt - hit}


def _unwrap(cost: Any) -> Any:
    """The calibrated model under any wrappers (``ScaledCost.inner``), or None."""
    for _ in range(4):
        if getattr(cost, "stack", None) is not None:
            return cost
        cost = getattr(cost, "inner", None)
    return None


def _pair(band: Any, fitted: bool) -> tuple[float, float]:
    if band is None:
        return (0.0, 0.0)
    return (band.optimistic, band.pessimistic) if fitted else (band.optimistic_extrapolated, band.pessimistic_extrapolated)


@dataclass(frozen=True, slots=True)
class RunRegime:
    """What a summary reports of a run against its stack's fitted regime."""

    report: dict[str, Any]                  # summary.json's ``cost_regime``
    band_e2e: tuple[float, float]
    band_ttft: tuple[float, float]
    band_step: tuple[float, float] | None = None  # the stack's step band as this run earned it (None: the basis's)


def run_regime(cost: Any, static_basis: str, req: pd.DataFrame) -> RunRegime:
    """The run's verdict: ``fitted`` only where the cost model's own basis is fitted (GPU, TP,
    dense) and the run's batch, context and prompt p95s are inside the fitted regime; else
    ``extrapolated``, naming each quantity and how far. The step, E2E and TTFT bands are the stack's
    held-out pairs, widened (its ``_extrapolated`` pair) outside the regime. No regime recorded
    (another cost model, or a stack without an end-to-end fit): an empty report."""
    cal = _unwrap(cost)
    if cal is None or cal.stack.regime is None:
        return RunRegime({}, (0.0, 0.0), (0.0, 0.0))
    stack, r = cal.stack, cal.stack.regime
    q = run_quantities(req)
    if static_basis == "fitted":  # GPU, TP and architecture already judged by the cost model
        chk = check_run(r, q)
    else:
        chk = check_run(r, q, gpu=cal.gpu.key, tp=cal.tp, moe=cal.model.is_moe)
    fitted = static_basis == "fitted" and chk.inside
    detail = chk.line(r) if chk.outside or fitted else "extrapolated by the cost model's basis (GPU, TP or MoE)"
    if not len(q["context"]):
        detail += " (no request was served: batch and context not checked)"
    report = {"basis": "fitted" if fitted else "extrapolated", "detail": detail, "outside": list(chk.outside),
              "run_p95": {k: round(v, 1) for k, v in chk.observed},
              "fitted_p95": {k: r.upper(k) for k in QUANTITIES}}
    return RunRegime(report, _pair(stack.band_e2e, fitted), _pair(stack.band_ttft, fitted), _pair(stack.band, fitted))
