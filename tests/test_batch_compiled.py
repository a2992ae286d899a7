"""A step's batch described by the compiled loop (``_quiet_steps.batch``) is ``StepKernel.batch``'s.

The Python loop in ``sim/engine/step.py`` is the reference: the same plans described both ways
must give equal StepBatches, field for field and type for type (the prefill pairs a float summed
in the same order), on decodes, prefill chunks, a re-prefill after a preemption, forked members
that ride free, a slab (no pages) and large pairs; and whole runs must be the same.
Skipped, with the reason, where the extension was not built.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.cost import StepBatch
from sim.engine import step
from sim.sched.plan import StepPlan
from tests.helpers import conv_slice, req, require_built, same_either_way


def described(plan: StepPlan, B: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    from types import SimpleNamespace

    k = SimpleNamespace(page_size=B, block_bytes=4096)
    compiled = step.StepKernel.batch(k, plan)  # type: ignore[arg-type]
    monkeypatch.setattr(step, "BATCH", None)
    python = step.StepKernel.batch(k, plan)  # type: ignore[arg-type]
    monkeypatch.undo()
    return compiled, python


def a_plan() -> StepPlan:
    dec, chunk, whole, back, rider = req(0, 30), req(1, 100), req(2, 7), req(3, 50), req(4, 30)
    dec.num_output, dec.num_tokens, dec.num_computed_tokens = 3, 33, 32          # a decode
    chunk.num_computed_tokens = 64                                                # a chunk after 64
    back.num_output, back.num_tokens = 2, 52                                      # re-prefill, whole
    return StepPlan(scheduled=[(dec, 1), (chunk, 36), (whole, 7), (back, 52), (rider, 30)], free_riders={4},
                    swap_out_blocks=2, swap_in_blocks=5)


@pytest.mark.parametrize("B", [16, 1, 0])
def test_a_plan_is_described_alike(B: int, monkeypatch: pytest.MonkeyPatch) -> None:
    require_built(step.BATCH, "sim/engine/fastforward/_quiet_steps.c")
    compiled, python = described(a_plan(), B, monkeypatch)
    assert type(compiled) is StepBatch and compiled == python
    assert [type(x) for x in compiled] == [type(x) for x in python]
    assert compiled.num_decode_seqs == 1 and compiled.num_prefill_seqs == 3, "the rider computes nothing"


@pytest.mark.parametrize("c", [(1 << 40) + 1, (1 << 62) + 3], ids=["past-2^53", "past-long-long"])
def test_large_pairs_are_pythons_division(c: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pairs past 2^53 (not exact in a double) round as Python's int division does, and past a
    C long long they are Python's ints."""
    require_built(step.BATCH, "sim/engine/fastforward/_quiet_steps.c")
    big = req(0, 10)
    big.num_computed_tokens, n = c, (1 << 13) + 1
    plan = StepPlan(scheduled=[(big, n), (req(1, 9), 9)])
    compiled, python = described(plan, 16, monkeypatch)
    assert compiled == python and compiled.prefill_attn_pairs == n * (2 * c + n + 1) / 2 + 45.0


def test_bad_plans_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    require_built(step.BATCH, "sim/engine/fastforward/_quiet_steps.c")
    with pytest.raises(TypeError):
        step.BATCH(StepPlan(scheduled=[(req(0, 5),)]), 16, 0, StepBatch)  # type: ignore[list-item, misc]
    with pytest.raises(TypeError):
        step.BATCH(StepPlan(), 16, 0, dict)  # type: ignore[misc]


def loops(which: str) -> Any:
    from sim.compiled import compiled

    return getattr(compiled("sim.engine.fastforward._quiet_steps"), "batch", None) if which == "compiled" else None


@pytest.mark.parametrize("cfg", [
    dict(max_model_len=4096, num_gpu_blocks=300, max_num_seqs=64),  # preempts: re-prefills
    dict(max_model_len=4096, num_gpu_blocks=700, async_scheduling=False, exact_steps=True),
    dict(max_model_len=4096, preset="paper-v0", num_gpu_blocks=3000),  # prompts only
], ids=["async-tight-pool", "sync-exact", "paper-v0"])
def test_a_replica_is_the_same_with_and_without_the_compiled_batch(cfg: dict[str, Any],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    require_built(step.BATCH, "sim/engine/fastforward/_quiet_steps.c")
    trace = conv_slice(150)
    same_either_way(monkeypatch, (step, "BATCH"), loops, trace, **cfg)


def test_the_computed_tokens_of_a_plan_sum_alike() -> None:
    """``StepKernel.computed_of``: compiled where built, else :func:`step.computed_of`."""
    require_built(step.BATCH, "sim/engine/fastforward/_quiet_steps.c")
    plan = a_plan()
    assert step.StepKernel.computed_of is not step.computed_of
    assert step.StepKernel.computed_of(plan.scheduled) == step.computed_of(plan.scheduled) == 32 + 64
    assert step.StepKernel.computed_of([]) == 0
    with pytest.raises(TypeError):
        step.StepKernel.computed_of([(req(0, 5),)])  # type: ignore[list-item]
