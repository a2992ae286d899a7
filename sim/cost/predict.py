"""Ask the cost model directly: how long does one step of a described batch take?

    >>> p = predict_step("llama-3.1-8b", "h100", tp=1, prefill_tokens=2048, batch=1)
    >>> p.step_s, p.basis, p.parts        # seconds, "fitted" | "extrapolated" | ..., named parts

``kvsim cost predict`` prints the same as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.cost import DEFAULT_COST_MODEL, build_cost_model
from sim.cost.batch import StepBatch, basis_of
from sim.errors import ConfigError
from sim.model.catalog import resolve_gpu, resolve_model


def batch_for(*, prefill_tokens: int = 0, batch: int = 1, context: int = 0, decode: bool = False,
              block_size: int = 16) -> StepBatch:
    """The StepBatch of ``batch`` prompts of ``prefill_tokens`` each, after ``context`` tokens
    already cached (prefill), or of ``batch`` decodes each attending ``context`` tokens."""
    if batch < 1:
        raise ConfigError(f"--batch {batch}: must be >= 1")
    if prefill_tokens < 0 or context < 0:
        raise ConfigError("--prefill-tokens and --context must be >= 0")
    pages = (lambda ctx: batch * -(-ctx // block_size)) if block_size > 0 else (lambda ctx: 0)
    if decode:
        if prefill_tokens:
            raise ConfigError("--decode takes --context (the KV length), not --prefill-tokens")
        if context < 1:
            raise ConfigError("--decode needs --context >= 1 (tokens each decode attends to)")
        return StepBatch(num_decode_seqs=batch, decode_context_tokens=batch * context,
                         pages_touched=pages(context), block_size=block_size)
    if prefill_tokens < 1:
        raise ConfigError("give --prefill-tokens >= 1 (a prefill step) or --decode --context C")
    p = prefill_tokens
    return StepBatch(prefill_tokens=batch * p, num_prefill_seqs=batch,
                     prefill_attn_pairs=batch * p * (context + (p + 1) / 2),
                     prefill_context_tokens=batch * (context + p), pages_touched=pages(context + p),
                     block_size=block_size)


@dataclass(frozen=True, slots=True)
class Prediction:
    step_s: float
    cost_model: str
    basis: str
    basis_detail: str
    band: tuple[float, float]
    parts: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        lo, hi = self.band
        return {"step_s": self.step_s, "cost_model": self.cost_model, "basis": self.basis,
                "basis_detail": self.basis_detail,
                "band_s": [self.step_s * (1 + lo), self.step_s * (1 + hi)], "parts": self.parts}


def predict_step(model: str, gpu: str, tp: int = 1, *, prefill_tokens: int = 0, batch: int = 1,
                 context: int = 0, decode: bool = False, block_size: int = 16,
                 cost_model: str = DEFAULT_COST_MODEL, serving_stack: str = "vllm-v1",
                 calibration: Path | None = None) -> Prediction:
    """One step's duration for the described batch (see :func:`batch_for`)."""
    if tp < 1:
        raise ConfigError(f"--tp {tp}: must be >= 1")
    b = batch_for(prefill_tokens=prefill_tokens, batch=batch, context=context, decode=decode,
                  block_size=block_size)
    cost = build_cost_model(cost_model, resolve_model(model), resolve_gpu(gpu), tp, calibration, serving_stack)
    step = cost.step_time(b)
    explain = getattr(cost, "parts", None)
    parts = explain(b) if callable(explain) else {"step": step}
    info = basis_of(cost)
    return Prediction(step, cost.name, info.basis, info.detail, info.band,
                      {k: float(v) for k, v in parts.items()})
