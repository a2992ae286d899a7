"""A step's batch (:func:`sim.engine.step_batch.batch_of`, ``StepKernel.batch``) and a window's
finished decoders leaving its indexes (:func:`sim.engine.fastforward.decoders.leave_all`), on
cases the runs rarely reach: forked members that ride free, a re-prefill after a preemption, a
slab (no pages), pairs past 2^53, a decoder missing from its bucket. The same source compiled
or not; CI runs this file both ways."""

from __future__ import annotations

from typing import Any

import pytest

from sim.cost import StepBatch
from sim.engine.fastforward.decoders import leave_all
from sim.engine.step_batch import batch_of, computed_of
from sim.sched.plan import StepPlan
from tests.helpers import req


def a_plan() -> StepPlan:
    dec, chunk, whole, back, rider = req(0, 30), req(1, 100), req(2, 7), req(3, 50), req(4, 30)
    dec.num_output, dec.num_tokens, dec.num_computed_tokens = 3, 33, 32          # a decode
    chunk.num_computed_tokens = 64                                                # a chunk after 64
    back.num_output, back.num_tokens = 2, 52                                      # re-prefill, whole
    return StepPlan(scheduled=[(dec, 1), (chunk, 36), (whole, 7), (back, 52), (rider, 30)], free_riders={4},
                    swap_out_blocks=2, swap_in_blocks=5)


@pytest.mark.parametrize("B", [16, 1, 0])
def test_a_plan_is_described(B: int) -> None:
    b = batch_of(a_plan(), B, 4096)
    pages = sum(-(-ctx // B) for ctx in (33, 100, 7, 52)) if B else 0
    pairs = 36 * (2 * 64 + 36 + 1) / 2 + 7 * (7 + 1) / 2 + 52 * (52 + 1) / 2
    assert type(b) is StepBatch
    assert b == StepBatch(36 + 7 + 52, 3, pairs, 100 + 7 + 52, 1, 33, pages, B, 2, 5, 4096)
    assert [type(x) for x in b] == [int, int, float, *[int] * 8]
    assert computed_of(a_plan().scheduled) == 32 + 64 + 0 + 0 + 0 and computed_of([]) == 0


def test_large_pairs_are_pythons_division() -> None:
    """Pairs past 2^53 (not exact in a double) round as Python's int division does."""
    big = req(0, 10)
    c, n = (1 << 40) + 1, (1 << 13) + 1
    big.num_computed_tokens = c
    b = batch_of(StepPlan(scheduled=[(big, n), (req(1, 9), 9)]), 16, 0)
    assert b.prefill_attn_pairs == n * (2 * c + n + 1) / 2 + 45.0


def window_of(B: int) -> tuple[list[Any], list[list[Any]]]:
    """Six decoders at virtual counts, indexed in B buckets, each holding some blocks."""
    from sim.kv.block_table import BlockTable

    reqs = [req(i, 10 + 7 * i) for i in range(6)]
    buckets: list[list[Any]] = [[] for _ in range(B)]
    for i, r in enumerate(reqs):
        r.num_computed_tokens, r.num_output, r.num_tokens = 9 + 5 * i - 3, 2 + i, 10 + 5 * i - 3
        r.kv = BlockTable(blocks=list(range(i + 1)))
        buckets[(1 - r.num_computed_tokens) % B].append(r)
    return reqs, buckets


@pytest.mark.parametrize("paged", [True, False])
def test_finished_decoders_leave(paged: bool) -> None:
    reqs, buckets = window_of(4)
    before = [(r.num_computed_tokens, r.num_output, r.num_tokens) for r in reqs]
    done = [reqs[4], reqs[1], reqs[2]]
    assert leave_all(done, buckets, 3, paged) == ((9 + 20 - 3) + (9 + 5 - 3) + (9 + 10 - 3), 5 + 2 + 3 if paged else 0)
    left = {r.uid for b in buckets for r in b}
    assert left == ({0, 3, 5} if paged else set(range(6)))
    assert [(r.num_computed_tokens, r.num_output, r.num_tokens) for r in reqs] == [
        (c + 3, o + 3, t + 3) if r in done else (c, o, t) for r, (c, o, t) in zip(reqs, before, strict=True)]


def test_a_decoder_not_in_its_bucket_is_an_error() -> None:
    _, buckets = window_of(4)
    with pytest.raises(ValueError):
        leave_all([req(9, 5)], buckets, 1, True)
