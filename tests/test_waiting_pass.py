"""The waiting pass (``sim/sched/waiting_pass.py``), compiled by Cython from its source, admits,
notes and counts as that source run as Python (``as_python``; where it was not compiled it is
that Python, and only the expected answers are checked). One pass over fresh requests reaches each of its decisions: every
request fits, blocks run out, the seq cap, the token budget, the watermark; ``admits_nothing``
answers each of its cases. Whole simulations compiled and in pure Python:
``tests/test_kv_subclass_contract.py``."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from sim.compiled import is_compiled
from sim.sched import waiting_pass
from tests.helpers import as_python, req


def ways() -> list[ModuleType]:
    """The module as this process runs it, and its source as Python where that is another."""
    return [waiting_pass, as_python(waiting_pass)] if is_compiled(waiting_pass) else [waiting_pass]


def scheduler(blocks: int, seqs: int, running: int, watermark: int = 0, full_isl: bool = True,
              kv_type: Any = None, keyed: bool = False) -> Any:
    """A scheduler on a fresh paged pool of ``blocks`` blocks of 4, ``running`` requests admitted."""
    from sim.kv.paged import PagedAllocator
    from sim.sched.admission import Admission
    from sim.sched.plan import StepPlan
    from sim.sched.scheduler import Scheduler

    kv = (kv_type or PagedAllocator)(blocks, 4)
    if keyed:
        kv.lazy_unique = False  # as sim/cluster/events.py sets it
    sched = Scheduler(kv, max_num_seqs=seqs, max_num_batched_tokens=1 << 20,
                      admission=Admission(reserve_full_isl=full_isl, watermark_blocks=watermark))
    for i in range(running):
        sched.add(req(100 + i, 4))
    waiting_pass.admit(sched, StepPlan(), 1 << 20, 0.0, 0)
    return sched


def one_pass(mod: ModuleType, *, budget: int, prompts: list[int], **kw: Any) -> Any:
    """One waiting pass (``mod.admit``) over fresh requests: what it admitted, and the margins,
    counters and prefix map it left."""
    from sim.sched.plan import StepPlan

    sched = scheduler(**kw)
    kv = sched.kv
    for i, p in enumerate(prompts):
        sched.add(req(i, p))
    plan = StepPlan()
    mod.admit(sched, plan, budget, 1.5, 7)
    m, s = kv.headroom, sched.seq_margin
    return ([(r.uid, n, r.seq, r.first_scheduled_step, r.prefix_hit_tokens) for r, n in plan.scheduled],
            (m.fail_max, m.pass_min), (s.fail_max, s.pass_min), (sched.stats.queries, sched.stats.hits),
            kv.num_free_blocks, [r.uid for r in sched.waiting], sorted(kv.pool.cache))


@pytest.mark.parametrize(("case", "kw", "admits"), [
    ("all fit", dict(blocks=64, seqs=8, budget=100, running=1, prompts=[5, 9, 13]), 3),
    ("the third has no blocks", dict(blocks=12, seqs=8, budget=100, running=1, prompts=[9, 17, 21]), 2),
    ("the seq cap", dict(blocks=64, seqs=3, budget=100, running=1, prompts=[5, 5, 5]), 2),
    ("the budget ends it", dict(blocks=64, seqs=8, budget=12, running=0, prompts=[5, 5, 5]), 3),
    ("the watermark", dict(blocks=12, seqs=8, budget=100, running=1, prompts=[9, 17], watermark=3), 1),
    ("the watermark, nothing running", dict(blocks=12, seqs=8, budget=100, running=0, prompts=[30, 9],
                                            watermark=3), 1),
    ("blocks keyed in the map", dict(blocks=64, seqs=8, budget=100, running=1, prompts=[5, 9, 13], keyed=True), 3),
])
def test_one_pass_admits_notes_and_counts_as_its_source(case: str, kw: dict[str, Any], admits: int) -> None:
    here, *source = (one_pass(mod, **kw) for mod in ways())
    assert len(here[0]) == admits, case
    assert all(here == other for other in source), case


def nothing_case(mod: ModuleType, *, head: Any, budget: int = 100, **kw: Any) -> Any:
    """``mod.admits_nothing``: its answer and the margins it left."""
    sched = scheduler(**kw)
    said = mod.admits_nothing(sched, head() if head is not None else None, budget)
    m, s = sched.kv.headroom, sched.seq_margin
    return said, (m.fail_max, m.pass_min), (s.fail_max, s.pass_min)


def head(prompt: int, content: bool = False) -> Any:
    return lambda: req(50, prompt, ids=tuple(range(prompt)) if content else None)


@pytest.mark.parametrize(("case", "kw", "expect"), [
    ("no head", dict(blocks=12, seqs=8, running=1, head=None), True),
    ("no budget", dict(blocks=12, seqs=8, running=1, head=head(9), budget=0), True),
    ("the seq cap", dict(blocks=64, seqs=2, running=2, head=head(9)), True),
    ("fits", dict(blocks=12, seqs=8, running=1, head=head(9)), False),
    ("no blocks", dict(blocks=12, seqs=8, running=1, head=head(60)), True),
    ("the watermark", dict(blocks=12, seqs=8, running=1, head=head(33), watermark=3), True),
    ("prompt content", dict(blocks=12, seqs=8, running=1, head=head(60, content=True)), False),
    ("no full-ISL reserve", dict(blocks=12, seqs=8, running=1, head=head(60), full_isl=False), False),
])
def test_admits_nothing_answers_and_notes_as_its_source(case: str, kw: dict[str, Any], expect: bool) -> None:
    here, *source = (nothing_case(mod, **kw) for mod in ways())
    assert here[0] is expect, case
    assert all(here == other for other in source), case
