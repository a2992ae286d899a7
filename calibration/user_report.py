"""What a user's serving-stack fit can and cannot say: its band, findings and warnings.

- The band is the fit's own leave-one-stage-out error on mean E2E (each stage replayed under a
  refit on the others), never the in-sample error. With one stage there is nothing to hold out:
  the fit says so, and the committed ``vllm-v1`` band stands in, labelled.
- A finding is a term the data would push past its physical bound (a kernel multiplier below 1,
  an overhead below 0, a term past its cap): the bounded value ships, the wish is reported.
- A warning names what the data cannot pin: with one stage, most of the split between the six
  terms; on one model at one TP, always the split between eta x t_fixed and cpu_s (both add a
  constant to every step).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calibration.bands import band_of
from calibration.user_fit import HI, LO, NAMES, SCALE, UserFit, fmt_term
from calibration.v1_fit import Layout, stack_entry
from sim.cost.stack import DEFAULT_STACK, resolve_stack

PERCENTILE_ROWS = 10  # held-out stages from which the band is their 10th / 90th percentile
MEANING = {
    "eta": "token-independent kernel time per step: weights read, launches",
    "eta_tok": "token-bound dense kernels: prefill chunks, large decode batches",
    "eta_attn": "attention over the KV cache",
    "cpu_s": "host time per step",
    "per_seq_s": "host time per sequence in a step",
    "prefill_s": "extra time of a step that prefills",
}


def findings(fit: UserFit) -> list[str]:
    """Terms whose unbounded least-squares value (at the final schedules) leaves the bounds."""
    out = []
    for k, name in enumerate(NAMES):
        v, tol = float(fit.free[k]), 0.02 * SCALE[k]
        if v < LO[k] - tol:
            why = ("isolated kernel timings are a lower bound inside an engine, so the kernel basis is slow for "
                   "this model and GPU, or the runs were not served as the flags say (GPU, TP, engine limits)"
                   if k < 3 else "the kernel basis alone is slower than these runs")
            out.append(f"finding: {name} wants {fmt_term(name, v)} < {fmt_term(name, LO[k])} ({MEANING[name]}); "
                       f"held at the bound: {why}")
        elif v > HI[k] + tol:
            out.append(f"finding: {name} wants {fmt_term(name, v)}, past its cap {fmt_term(name, HI[k])} ({MEANING[name]}): "
                       "slower than GPU work and engine overheads explain (a front-end, network or client limit?)")
    return out


def _fixed_per_step(fit: UserFit) -> float:
    """Mean token-independent kernel time per busy step over the stages (replay gradients)."""
    ts = [r.grad_e2e[0] / r.grad_e2e[3] for r in fit.results if r.grad_e2e[3] > 0]
    return float(np.mean(ts)) if ts else 0.0


def warnings(fit: UserFit) -> list[str]:
    out = []
    if len(fit.stages) == 1:
        out.append("warning: one stage: the fit is under-determined. One rate pins three numbers for six terms: "
                   "its decode time per token (the step at its batch size: eta x kernels + cpu_s + per_seq_s x B), "
                   "its TTFT (prefill_s + the token-bound kernels, eta_tok) and its mean E2E. per_seq_s needs a "
                   "second batch size, eta_tok vs eta_attn a second context length: those and the split of the "
                   "step time between kernels and host are the priors' (multipliers 1, overheads near vLLM V1's), "
                   "not your data's. Benchmark two or more request rates.")
    if len({(s.model, s.tp) for s in fit.stages}) == 1:
        fixed = _fixed_per_step(fit)
        out.append(f"note: on one model at one TP, eta x t_fixed ({fixed * 1e3:.2f} ms of kernels) and cpu_s add the "
                   f"same constant to every step: the runs pin their sum, {(fit.theta[0] * fixed + fit.theta[3]) * 1e3:.2f} "
                   "ms per step; the split is the prior's (eta near 1)")
    return out


def band(fit: UserFit) -> dict[str, Any]:
    what = "stages (leave one stage out: refit without it, replay it; mean E2E)"
    if len(fit.heldout) >= PERCENTILE_ROWS:
        ratio = np.array([r.stage.e2e_mean / h - 1 for r, h in zip(fit.results, fit.heldout, strict=True)])
        return band_of(ratio, len(ratio), what)
    if fit.heldout:  # too few for percentiles: the band spans every held-out error
        ratio = np.array([r.stage.e2e_mean / h - 1 for r, h in zip(fit.results, fit.heldout, strict=True)])
        lo, hi = round(min(0.0, float(ratio.min())), 4), round(max(0.0, float(ratio.max())), 4)
        return {"optimistic": lo, "pessimistic": hi, "optimistic_extrapolated": round(lo * 1.5, 4),
                "pessimistic_extrapolated": round(hi * 1.5, 4),
                "basis": f"lowest / highest measured/predicted - 1 over {len(ratio)} held-out {what}; "
                         "extrapolated (another GPU or TP than fitted): widened x1.5"}
    b = resolve_stack(DEFAULT_STACK).band
    return {"optimistic": b.optimistic, "pessimistic": b.pessimistic,
            "optimistic_extrapolated": b.optimistic_extrapolated, "pessimistic_extrapolated": b.pessimistic_extrapolated,
            "basis": f"no held-out stage of your own (one stage): the {DEFAULT_STACK} profile's band stands in ({b.basis})"}


def stage_rows(fit: UserFit) -> list[dict[str, Any]]:
    held = fit.heldout or tuple(float("nan") for _ in fit.results)
    return [{"stage": r.stage.key, "source": r.stage.source, "model": r.stage.model, "tp": r.stage.tp,
             "rate": r.stage.rate, "e2e_measured_s": round(r.stage.e2e_mean, 4), "e2e_fitted_s": round(r.e2e_mean, 4),
             "e2e_heldout_s": round(float(h), 4), "ttft_measured_s": round(r.stage.ttft_mean, 5),
             "ttft_fitted_s": round(r.ttft_mean, 5), "dtpt_measured_ms": round(r.stage.dtpt() * 1e3, 3),
             "dtpt_fitted_ms": round(r.dtpt * 1e3, 3)} for r, h in zip(fit.results, held, strict=True)]


def profile_entry(fit: UserFit, *, fitted_on: dict[str, Any], sources: str) -> dict[str, Any]:
    """The profile's stacks.yaml entry: the coefficients as replayed, and what the fit knows of them."""
    e = stack_entry(Layout([s.tp for s in fit.stages]), fit.theta, engine=f"your vLLM ({sources})",
                    description=f"fitted by `kvsim calibrate fit --from {sources}`",
                    fitted_on={**fitted_on, "rows": len(fit.stages), "refs": [s.key for s in fit.stages],
                               "targets": "per-stage mean E2E, TTFT, decode time per token; replayed through the simulator",
                               "bounds": "kernel multipliers >= 1, overheads >= 0"})
    e["stages"] = stage_rows(fit)
    e["band"] = band(fit)
    e["findings"] = findings(fit)
    e["warnings"] = warnings(fit)
    e["iterations"] = fit.iterations
    return e
