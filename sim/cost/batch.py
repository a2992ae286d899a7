"""The step-cost seam: what one engine step computes (:class:`StepBatch`) and the protocol
every cost model implements (:class:`StepCostModel`).

The engine only ever builds a ``StepBatch`` and calls ``step_time``; it knows nothing of how
a duration is derived. This file has no imports from the rest of ``sim`` so that the engine,
fast-forward and every cost model can depend on it without depending on each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable


class StepBatch(NamedTuple):
    """What one engine step computes, as the cost model sees it.

    (An immutable NamedTuple rather than a frozen dataclass: one is built per simulated step,
    and tuple construction is several times cheaper.)

    Attributes:
        prefill_tokens: new tokens of prefilling requests (sum of chunk sizes).
        num_prefill_seqs: requests that run a prefill chunk this step.
        prefill_attn_pairs: causal query-key pairs of the prefill chunks,
            sum over chunks of ``chunk * (computed_before + (chunk + 1) / 2)``.
        prefill_context_tokens: KV tokens the prefill chunks attend to (computed + chunk).
        num_decode_seqs: decoding requests (one token each).
        decode_context_tokens: KV tokens read by the decodes (sum of context lengths).
        pages_touched: KV pages (blocks) read this step, sum over scheduled requests of
            ``cdiv(context, block_size)``; the term through which ``block_size`` changes cost.
        block_size: tokens per KV block (page); for a slab allocator the value is 0.
        swap_out_blocks / swap_in_blocks: blocks moved GPU->CPU / CPU->GPU (swap preemption).
        block_bytes: bytes per block on one GPU (all layers), for swap transfer time.
    """

    prefill_tokens: int = 0
    num_prefill_seqs: int = 0
    prefill_attn_pairs: float = 0.0
    prefill_context_tokens: int = 0
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0
    pages_touched: int = 0
    block_size: int = 16
    swap_out_blocks: int = 0
    swap_in_blocks: int = 0
    block_bytes: int = 0

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.num_decode_seqs

    @property
    def num_seqs(self) -> int:
        return self.num_prefill_seqs + self.num_decode_seqs


@runtime_checkable
class StepCostModel(Protocol):
    """Maps one engine step to its duration in seconds."""

    @property
    def name(self) -> str:
        """Shown in every output, e.g. "constant:0.01", "roofline (uncalibrated; h100, tp=1)"."""
        ...

    def step_time(self, batch: StepBatch) -> float: ...


@dataclass(frozen=True, slots=True)
class CostBasis:
    """What a cost model's step times rest on, for one (model, GPU, TP).

    Attributes:
        basis: ``fitted`` (measurements exist for this GPU and TP), ``extrapolated`` (some term
            scaled from another GPU or TP by datasheet ratios; ``detail`` says which and how),
            ``uncalibrated`` (analytic) or ``exact`` (``constant:SECONDS``, by construction).
        detail: one line naming each term's source.
        band: (optimistic, pessimistic) step-time error as fractions, e.g. (-0.08, 0.12): the
            10th / 90th percentile of measured / predicted - 1 on held-out rows.
    """

    basis: str
    detail: str = ""
    band: tuple[float, float] = (0.0, 0.0)


def basis_of(cost: StepCostModel) -> CostBasis:
    """The model's :class:`CostBasis` (models without one are ``uncalibrated``)."""
    b = getattr(cost, "basis", None)
    return b if isinstance(b, CostBasis) else CostBasis("uncalibrated", cost.name)
