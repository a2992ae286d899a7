"""Step times of decode-only steps, timed in bulk for a fast-forward window.

Between events (a finish, an admission, an arrival that can be admitted) a window's steps are
all alike: ``seqs`` decoders, no prefill, no swap; only the context tokens and the pages read
change (``+ seqs`` tokens a step, ``+ 1`` page per decoder crossing a block boundary). The
window therefore asks once per decoder count for ``time(context_tokens, pages)``. A cost model
may supply its :class:`DecodeTerms` (:class:`DecodeTimes`: every term that does not depend on
the two counts, folded once); :func:`decode_step_time` then applies the rest -- the same float
operations in the same order as its ``step_time``, so the result is the same float bit for
bit -- and :func:`decode_step_times` applies them to numpy arrays of counts, element by element
(one IEEE operation per ufunc, no fused multiply-add: the same floats again), for a run of
quiet steps (:mod:`sim.engine.fastforward.runs`). Any other model gets ``step_time`` on the
equivalent :class:`StepBatch`, and no vector form.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple, Protocol, TypeGuard, runtime_checkable

import numpy as np

from sim.cost.batch import StepBatch, StepCostModel

DecodeTime = Callable[[int, int], float]  # (context tokens, pages touched) -> seconds
DecodeTimeArray = Callable[[np.ndarray, np.ndarray], np.ndarray]  # the same over int64 arrays
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
    dense, eta_attn, head, a_kv, a_fl, a_pg, roof, floor, tail, sched, is_async = cost.decode_terms(seqs, block_size)

    def time(ctx: int, pages: int) -> float:
        t = dense + eta_attn * (head + a_kv * ctx + a_fl * (0.0 + ctx) + a_pg * pages)
        if t < roof:
            t = roof
        if t < floor:
            t = floor
        t += tail
        if not is_async:
            return t + sched
        return t if t > sched else sched

    return time


def decode_step_times(cost: StepCostModel, seqs: int, block_size: int) -> DecodeTimeArray | None:
    """:func:`decode_step_time` element by element over arrays of counts; None when the model
    has no folded terms. The callable carries them (``.terms``) for a compiled run layout
    (:mod:`sim.engine.fastforward.run_layout`)."""
    if not folds_decode_terms(cost):
        return None
    return ArrayTimes(cost.decode_terms(seqs, block_size))


class ArrayTimes:
    """``times(ctx, pages)``: :func:`decode_step_time`'s operations on arrays, in its order."""

    __slots__ = ("terms",)

    def __init__(self, terms: DecodeTerms) -> None:
        self.terms = terms

    def __call__(self, ctx: np.ndarray, pages: np.ndarray) -> np.ndarray:
        dense, eta_attn, head, a_kv, a_fl, a_pg, roof, floor, tail, sched, is_async = self.terms
        # the scalar expression's operations in its order, in place; a + b == b + a and a b == b a
        # hold bit for bit in IEEE arithmetic, so only the grouping must be kept
        c = ctx.astype(np.float64)  # exact: counts < 2**53, as Python's int-to-float (0.0 + c == c)
        t = np.multiply(c, a_kv)
        t += head                              # head + a_kv ctx
        t += np.multiply(c, a_fl, out=c)       # ... + a_fl ctx
        p = pages.astype(np.float64)
        p *= a_pg
        t += p                                 # ... + a_pg pages
        t *= eta_attn
        t += dense
        np.maximum(t, roof, out=t)             # == the scalar ifs (no NaN: counts are finite)
        np.maximum(t, floor, out=t)
        t += tail
        if not is_async:
            t += sched
        else:
            np.maximum(t, sched, out=t)
        return t
