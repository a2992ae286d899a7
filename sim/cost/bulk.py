"""Step times of decode-only steps, timed in bulk for a fast-forward window.

Between events (a finish, an admission, an arrival that can be admitted) a window's steps are
all alike: ``seqs`` decoders, no prefill, no swap; only the context tokens and the pages read
change (``+ seqs`` tokens a step, ``+ 1`` page per decoder crossing a block boundary). The
window therefore asks once per decoder count for ``time(context_tokens, pages)``. A cost model
may supply its :class:`DecodeTerms` (:class:`DecodeTimes`: every term that does not depend on
the two counts, folded once); :func:`decode_step_time` then applies the rest
(:func:`sim.cost.decode_time.step_time`) -- the same float operations in the same order as its
``step_time``, so the result is the same float bit for bit. A run of quiet steps
(:mod:`sim.engine.fastforward.run_layout`) applies the same function step by step, from the
terms (:func:`decode_step_terms`). Any other model gets ``step_time`` on the equivalent
:class:`StepBatch`, and no run layout.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple, Protocol, TypeGuard, runtime_checkable

from sim.cost.batch import StepBatch, StepCostModel
from sim.cost.decode_time import step_time as terms_time

DecodeTime = Callable[[int, int], float]  # (context tokens, pages touched) -> seconds
_new_batch = partial(tuple.__new__, StepBatch)


class DecodeTerms(NamedTuple):
    """``t = dense + eta_attn (head + a_kv ctx + a_fl ctx + a_pg pages)``, raised to ``roof``
    then ``floor``, plus ``tail``; plus ``sched`` (sync) or at least ``sched`` (async)."""

    dense: float
    eta_attn: float
    head: float
    a_kv: float
    a_fl: float
    a_pg: float
    roof: float
    floor: float
    tail: float
    sched: float
    is_async: bool


@runtime_checkable
class DecodeTimes(Protocol):
    def decode_terms(self, seqs: int, block_size: int) -> DecodeTerms:
        """The folded terms of ``step_time`` for a step of ``seqs`` decodes (no prefill, no
        swap) on pages of ``block_size`` tokens (0: contiguous)."""
        ...


def folds_decode_terms(cost: object) -> TypeGuard[DecodeTimes]:
    """Whether ``cost`` supplies its :class:`DecodeTerms` (:class:`DecodeTimes`): what ``isinstance``
    on the runtime-checkable protocol decides (its one method is there, and not None), without
    the protocol machinery's ~8 us a check (a fast-forward window asks once per window)."""
    return getattr(cost, "decode_terms", None) is not None


def decode_step_time(cost: StepCostModel, seqs: int, block_size: int, block_bytes: int) -> DecodeTime:
    """``time(ctx, pages) == cost.step_time(StepBatch(num_decode_seqs=seqs, decode_context_tokens=ctx,
    pages_touched=pages, block_size=block_size, block_bytes=block_bytes))``, bit for bit."""
    if not folds_decode_terms(cost):
        step_time = cost.step_time

        def by_batch(ctx: int, pages: int) -> float:
            return step_time(_new_batch((0, 0, 0.0, 0, seqs, ctx, pages, block_size, 0, 0, block_bytes)))

        return by_batch
    return partial(terms_time, *cost.decode_terms(seqs, block_size))


def decode_step_terms(cost: StepCostModel, seqs: int, block_size: int) -> DecodeTerms | None:
    """The folded terms :func:`decode_step_time` applies (None when the model has none), for a
    run of quiet steps timed step by step (:mod:`sim.engine.fastforward.run_layout`)."""
    if not folds_decode_terms(cost):
        return None
    return cost.decode_terms(seqs, block_size)
