"""A subclass of the paged allocator is served by its own methods, with or without a C compiler.

``PagedAllocator`` is the contract's extension point (``sim/kv/base.py``): a subclass may count
blocks its own way (``can_allocate``) or hand them out its own way (``append_block``,
``register_decoded_blocks``). The calls that stand in for those methods on the base class --
``allocate``'s and ``cross_boundary``'s one calls (``sim/kv/table_loops.py``: ``grow``,
``cross``), and fast-forward's block counts done inline -- must never go past an override,
compiled by Cython or not. The waiting pass, compiled or not, asks the allocator through its
methods: a subclass that refuses is refused either way.

The unit checks run in this process as it was built (CI runs this file once more with
``KVSIM_PURE_PYTHON=1``); whole simulations run here and in a subprocess with
``KVSIM_PURE_PYTHON=1``, and must agree.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pytest

from sim.kv.paged import PagedAllocator
from sim.request import Request
from tests.helpers import REPO, as_python, conv_slice, req

HELD_BACK = 9


class Holding(PagedAllocator):
    """Keeps 9 free blocks out of every allocation (the issue's example)."""

    def can_allocate(self, req: Request, num_new_tokens: int, hits: Any = (), *, reserve: int = 0) -> int:
        return super().can_allocate(req, num_new_tokens, hits, reserve=reserve + HELD_BACK)


class Counting(PagedAllocator):
    """The base class's blocks, counting the calls of its two fast-forward methods."""

    calls: ClassVar[Counter[str]] = Counter()

    def append_block(self, reqs: list[Request]) -> None:
        Counting.calls["append_block"] += len(reqs)
        super().append_block(reqs)

    def register_decoded_blocks(self, reqs: list[Request], ahead: int) -> None:
        Counting.calls["register_decoded_blocks"] += len(reqs)
        super().register_decoded_blocks(reqs, ahead)


class SaysPlain(PagedAllocator):
    """A subclass that opts in: its methods and arithmetic are the base class's."""

    plain_methods = True


KINDS: dict[str, type[PagedAllocator]] = {"paged": PagedAllocator, "holding": Holding, "counting": Counting}
CONFIGS: dict[str, dict[str, Any]] = {
    "async": dict(max_model_len=4096, num_gpu_blocks=300),  # preempts: a tight pool
    "sync": dict(max_model_len=4096, num_gpu_blocks=300, async_scheduling=False),
}


def simulate_with(kind: str, config: str, exact: bool) -> tuple[pd.DataFrame, pd.DataFrame, int, dict[str, int]]:
    """200 conv requests on ``kind``'s allocator: requests, steps, fast-forwarded steps, calls."""
    from sim.config import make_config
    from sim.run import build
    from sim.run.simulate import simulate

    Counting.calls.clear()
    plain, build.PagedAllocator = build.PagedAllocator, KINDS[kind]  # type: ignore[misc]  # the run's class, swapped
    try:
        res = simulate(make_config(**CONFIGS[config], exact_steps=exact), conv_slice(200, 4.0), check=True)
    finally:
        build.PagedAllocator = plain  # type: ignore[misc]  # and put back
    return res.requests, res.steps, res.summary.fast_forward_steps, dict(Counting.calls)


def pure_python(runs: list[tuple[str, str, bool]], tmp: Path) -> list[Any]:
    """:func:`simulate_with` for each run, in a subprocess with ``KVSIM_PURE_PYTHON=1``."""
    out = tmp / "runs.pkl"
    code = ("import pickle, sys; from tests.test_kv_subclass_contract import simulate_with as s; "
            f"pickle.dump([s(*r) for r in {runs!r}], open(sys.argv[1], 'wb'))")
    env = {**os.environ, "KVSIM_PURE_PYTHON": "1", "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code, str(out)], cwd=REPO, env=env, check=True)
    with out.open("rb") as f:
        return pickle.load(f)  # type: ignore[no-any-return]  # our own subprocess's list


def require_compiled() -> None:
    """Skip, with the reason, where this process runs the pure-Python paths."""
    from sim.compiled import is_compiled
    from sim.kv import table_loops
    from sim.sched import waiting_pass

    for m in (table_loops, waiting_pass):
        if not is_compiled(m):
            pytest.skip(f"{m.__name__} is not compiled here (no build, or KVSIM_PURE_PYTHON set)")


def assert_same(a: Any, b: Any) -> None:
    pd.testing.assert_frame_equal(a[0], b[0], check_exact=True)
    pd.testing.assert_frame_equal(a[1], b[1], check_exact=True)


def test_a_subclass_gets_no_one_call_path_unless_it_says_its_methods_are_plain() -> None:
    def fused(kv: PagedAllocator) -> list[bool]:
        return [kv._crosses, kv.cross_call() is not None]

    assert all(fused(PagedAllocator(20, 4))) and all(fused(SaysPlain(20, 4)))
    for cls in (Holding, Counting):
        assert not any(fused(cls(20, 4))), cls.__name__
        assert not cls.plain_methods


def test_an_allocator_that_holds_back_9_blocks_is_refused() -> None:
    """A new table and a table that grows (the base class: ``grow``'s one call): 19 usable
    blocks, 12 asked for, 7 left -- the base class gives them, the subclass refuses and takes
    nothing."""
    for cls, admits in ((PagedAllocator, True), (Holding, False)):
        kv = cls(20, 4)
        new, grows = req(0, 48), req(1, 48)
        assert kv.allocate(new, 48) is admits, (cls.__name__, "a new table")
        kv.free(new)
        assert kv.allocate(grows, 16)  # 4 blocks: 15 left, 9 held back
        grows.num_computed_tokens = 16
        assert kv.allocate(grows, 32) is admits, (cls.__name__, "a table that grows")
        assert kv.num_held_blocks(grows) == (12 if admits else 4)
        assert kv.num_free_blocks == kv.usable_blocks - kv.num_held_blocks(grows)
        kv.check([grows])


def waiting_passes() -> list[Any]:
    """The waiting pass as this process runs it, and its source as Python where it is compiled."""
    from sim.compiled import is_compiled
    from sim.sched import waiting_pass

    return [waiting_pass, as_python(waiting_pass)] if is_compiled(waiting_pass) else [waiting_pass]


def test_the_waiting_pass_admits_what_the_allocator_allows_and_the_holding_one_refuses() -> None:
    """The scheduler asks the allocator (``allocate``, through ``can_allocate``): 19 usable blocks,
    one running request holding 1, a head of 12 -- the base class admits it, the subclass that
    holds back 9 refuses it, in the waiting pass compiled by Cython and in its source as Python."""
    from sim.sched.plan import StepPlan
    from sim.sched.scheduler import Scheduler

    for mod in waiting_passes():
        for cls, admits in ((PagedAllocator, True), (Holding, False)):
            kv = cls(20, 4)
            sched = Scheduler(kv, max_num_seqs=8, max_num_batched_tokens=1 << 20)
            sched.add(req(0, 4))
            sched.admit(StepPlan(), 1 << 20, 0.0, 0)
            sched.add(req(1, 48))
            plan = StepPlan()
            mod.admit(sched, plan, 1 << 20, 1.0, 1)
            assert [r.uid for r, _ in plan.scheduled] == ([1] if admits else []), (mod.__name__, cls.__name__)
            assert kv.num_held_blocks(sched.running[-1]) == (12 if admits else 1)
            assert kv.num_free_blocks == (6 if admits else 18) and len(sched.waiting) == (0 if admits else 1)
            kv.check(sched.running)


def test_a_simulation_on_the_holding_allocator_is_the_same_compiled_and_in_pure_python(tmp_path: Path) -> None:
    """Fast-forward and exact steps, compiled and pure: one answer, and not the base class's."""
    require_compiled()
    runs = [("holding", "async", False), ("holding", "async", True), ("holding", "sync", False)]
    pure = pure_python(runs, tmp_path)
    here = [simulate_with(*r) for r in runs]
    for c, p in zip(here, pure, strict=True):
        assert_same(c, p)
    assert_same(here[0], here[1])  # fast-forward asks for exact steps where the counting is its own
    base = simulate_with("paged", "async", True)
    assert base[0]["num_preemptions"].sum() != here[1][0]["num_preemptions"].sum(), \
        "holding back 9 blocks changed nothing: the test proves nothing"


@pytest.mark.parametrize("config", list(CONFIGS))
def test_overriding_append_block_and_register_decoded_blocks_are_called_when_fast_forwarding(
        config: str, tmp_path: Path) -> None:
    """Decoders cross block boundaries in bulk through the subclass's own methods, compiled and
    pure, and the run is the base class's and its exact steps' (where blocks are taken by
    ``allocate``, step by step: neither method is part of an exact step)."""
    require_compiled()
    (pure,) = pure_python([("counting", config, False)], tmp_path)
    ff, exact, base = (simulate_with("counting", config, False), simulate_with("counting", config, True),
                       simulate_with("paged", config, False))
    for run in (ff, pure):
        assert run[2] > 0, "no step was fast-forwarded: the test proves nothing"
        assert run[3].get("append_block", 0) > 0 and run[3].get("register_decoded_blocks", 0) > 0, run[3]
    assert ff[3] == pure[3], "the overrides were called otherwise compiled and in pure Python"
    for other in (pure, exact, base):
        assert_same(ff, other)
