"""Step times of decode-only steps, timed in bulk for a fast-forward window.

Between events (a finish, an admission, an arrival that can be admitted) a window's steps are
all alike: ``seqs`` decoders, no prefill, no swap; only the context tokens and the pages read
change (``+ seqs`` tokens a step, ``+ 1`` page per decoder crossing a block boundary). The
window therefore asks once per decoder count for ``time(context_tokens, pages)`` and calls it
per step. A cost model may supply it (:class:`DecodeTimes`: every term that does not depend on
the two counts folded once, the rest the same float operations in the same order as its
``step_time``, so the result is the same float bit for bit); any other model gets
``step_time`` on the equivalent :class:`StepBatch`.

Why a per-step function and not a numpy vector over the run: on the issue-19 configuration
(Azure conv, Llama-2-70B, TP 2) runs of event-free decode steps are short (mean 4 to 6
steps, median 2 to 4, measured from the exact step records), so the fixed cost of building
arrays exceeds what vectorising saves.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol, runtime_checkable

from sim.cost.batch import StepBatch, StepCostModel

DecodeTime = Callable[[int, int], float]  # (context tokens, pages touched) -> seconds
_new_batch = partial(tuple.__new__, StepBatch)


@runtime_checkable
class DecodeTimes(Protocol):
    def decode_step_time(self, seqs: int, block_size: int) -> DecodeTime:
        """``step_time`` of a step of ``seqs`` decodes (no prefill, no swap) on pages of
        ``block_size`` tokens (0: contiguous), as a function of its context tokens and pages."""
        ...


def decode_step_time(cost: StepCostModel, seqs: int, block_size: int, block_bytes: int) -> DecodeTime:
    """``time(ctx, pages) == cost.step_time(StepBatch(num_decode_seqs=seqs, decode_context_tokens=ctx,
    pages_touched=pages, block_size=block_size, block_bytes=block_bytes))``, bit for bit."""
    if isinstance(cost, DecodeTimes):
        return cost.decode_step_time(seqs, block_size)
    step_time = cost.step_time

    def time(ctx: int, pages: int) -> float:
        return step_time(_new_batch((0, 0, 0.0, 0, seqs, ctx, pages, block_size, 0, 0, block_bytes)))

    return time
