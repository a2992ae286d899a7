"""The compiled waiting pass (``sim/sched/_admit.c``) admits what the Python pass admits.

``waiting_pass.admit`` is the reference. Each run here goes both ways -- ``waiting_pass.PLAIN``
set and None -- and every request, step record and freed table must be the same, on
configurations that reach each of the compiled pass's decisions: a full pool (the no-hope check,
preemptions, re-admissions that hit their own blocks), the seq cap, the watermark, the
long-prefill threshold, whole prompts only (chunked prefill off), no prefix caching, sync and
async scheduling; and where it hands a pass back (prompt content, a priority queue, paper-v0's
hooks). The runs count the requests the compiled pass admitted, so that a test cannot pass by
never calling it. Skipped, with the reason, where the extension was not built.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.sched import waiting_pass
from tests.helpers import conv_slice, mooncake_slice, require_built, same_either_way


@pytest.fixture
def admitted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many requests each compiled call admitted (and -1 for a call that handed back)."""
    require_built(waiting_pass.PLAIN, "sim/sched/_admit.c")
    seen: list[int] = []
    compiled = waiting_pass.PLAIN

    def counting(sched: Any, plan: Any, *a: Any) -> Any:
        n0 = len(plan.scheduled)
        out = compiled(sched, plan, *a)  # type: ignore[misc]
        seen.append(len(plan.scheduled) - n0 if out is None else -1)
        return out

    monkeypatch.setattr(waiting_pass, "_COUNTING", counting, raising=False)
    return seen


def passes(which: str) -> Any:
    return getattr(waiting_pass, "_COUNTING", None) if which == "compiled" else None


CONFIGS = {
    "async": dict(max_model_len=8192, num_gpu_blocks=1500),
    "async-tight-pool": dict(max_model_len=4096, num_gpu_blocks=300, max_num_seqs=64),  # preempts, re-admits
    "sync-exact": dict(max_model_len=8192, num_gpu_blocks=700, async_scheduling=False, exact_steps=True),
    "seq-cap": dict(max_model_len=8192, num_gpu_blocks=3000, max_num_seqs=4),
    "watermark": dict(max_model_len=8192, num_gpu_blocks=600, watermark=0.05),
    "threshold": dict(max_model_len=8192, num_gpu_blocks=1500, long_prefill_token_threshold=64,
                      max_num_batched_tokens=512),
    "whole-prompts": dict(max_model_len=4096, num_gpu_blocks=3000, chunked_prefill=False,
                          max_num_batched_tokens=4096),  # a head longer than the budget left waits
    "no-caching": dict(max_model_len=4096, num_gpu_blocks=300, enable_prefix_caching=False, max_num_seqs=64),
    "swap": dict(max_model_len=4096, num_gpu_blocks=300, preemption="swap", max_num_seqs=64),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_a_replica_admits_the_same_with_and_without_the_compiled_pass(
        name: str, admitted: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    same_either_way(monkeypatch, (waiting_pass, "PLAIN"), passes, conv_slice(200, 4.0), **CONFIGS[name])
    assert sum(n for n in admitted if n > 0) > 0, "the compiled pass admitted nothing: the test proves nothing"
    assert -1 not in admitted, "a plain configuration was handed back"


def test_the_tight_pool_reaches_the_decisions_it_is_named_for(admitted: list[int],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The identity runs above prove something only if the compiled pass refuses heads for want
    of blocks and re-admits preempted requests that hit their own blocks."""
    run, _ = same_either_way(monkeypatch, (waiting_pass, "PLAIN"), passes, conv_slice(200, 4.0),
                             **CONFIGS["async-tight-pool"])
    pc = run.summary.prefix_cache
    assert run.summary.preemptions > 0 and pc.preempted_queries > 0 and pc.preempted_hits > 0
    assert admitted.count(0) > 0, "no compiled pass ended without an admission"


@pytest.mark.parametrize("name", ["async-tight-pool", "seq-cap", "watermark", "sync-exact"])
def test_the_margins_a_sweep_reuses_runs_by_are_noted_alike(name: str, admitted: list[int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block and seq-slot comparison is noted in the run's margins (``sim/kv/margin.py``),
    which decide whether a sweep point may be derived from another run: the compiled pass notes
    the same ones (the frames alone would not show a comparison left out)."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    margins = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(waiting_pass, "PLAIN", passes(which))
        seen: list[Any] = []
        simulate(make_config(**CONFIGS[name]), conv_slice(200, 4.0), on_build=seen.append)
        kv, sched = seen[0].kv, seen[0].sched
        margins.append([(m.fail_max, m.pass_min) for m in (kv.headroom, sched.seq_margin)])
    assert margins[0] == margins[1]
    assert sum(n for n in admitted if n > 0) > 0


@pytest.mark.parametrize(("cfg", "why"), [
    (dict(max_model_len=8192, num_gpu_blocks=3000, policy="priority"), "a priority queue"),
    (dict(max_model_len=8192, preset="paper-v0", num_gpu_blocks=3000), "paper-v0's hooks"),
])
def test_a_pass_it_does_not_handle_is_handed_back_whole(cfg: dict[str, Any], why: str, admitted: list[int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    same_either_way(monkeypatch, (waiting_pass, "PLAIN"), passes, conv_slice(60, 4.0), **cfg)
    assert admitted and set(admitted) == {-1}, f"{why}: the compiled pass admitted"


def test_a_candidate_with_prompt_content_is_handed_back_and_the_python_pass_goes_on(
        admitted: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Mooncake's hashed prompts probe the prefix cache by content: each such head goes to the
    Python pass, with the budget the compiled pass left."""
    run, _ = same_either_way(monkeypatch, (waiting_pass, "PLAIN"), passes, mooncake_slice(60),
                             max_model_len=8192, num_gpu_blocks=1200)
    assert -1 in admitted and run.summary.prefix_cache.hits > 0


def one_pass(which: str, *, blocks: int, seqs: int, budget: int, running: int, prompts: list[int],
             watermark: int = 0, kv_type: Any = None, keyed: bool = False) -> Any:
    """One waiting pass over fresh requests, ``running`` of them admitted first: what it admitted,
    and the margins, counters and prefix map it left (``keyed``: every block keyed in the map,
    as KV events make the pool, not marked)."""
    from sim.kv.paged import PagedAllocator
    from sim.sched.admission import Admission
    from sim.sched.plan import StepPlan
    from sim.sched.scheduler import Scheduler
    from tests.helpers import req

    kv = (kv_type or PagedAllocator)(blocks, 4)
    if keyed:
        kv.lazy_unique = False  # as sim/cluster/events.py sets it
    sched = Scheduler(kv, max_num_seqs=seqs, max_num_batched_tokens=1 << 20,
                      admission=Admission(watermark_blocks=watermark))
    for i in range(running):
        sched.add(req(100 + i, 4))
    waiting_pass.admit(sched, StepPlan(), 1 << 20, 0.0, 0)
    for i, p in enumerate(prompts):
        sched.add(req(i, p))
    plan = StepPlan()
    waiting_pass.PLAIN = passes(which)
    waiting_pass.admit(sched, plan, budget, 1.5, 7)
    m, s = kv.headroom, sched.seq_margin
    return ([(r.uid, n, r.seq, r.first_scheduled_step, r.prefix_hit_tokens) for r, n in plan.scheduled],
            (m.fail_max, m.pass_min), (s.fail_max, s.pass_min), (sched.stats.queries, sched.stats.hits),
            kv.num_free_blocks, [r.uid for r in sched.waiting], sorted(kv.pool.cache))


@pytest.mark.parametrize(("case", "kw"), [
    ("all fit", dict(blocks=64, seqs=8, budget=100, running=1, prompts=[5, 9, 13])),
    ("the third has no blocks", dict(blocks=12, seqs=8, budget=100, running=1, prompts=[9, 17, 21])),
    ("the seq cap", dict(blocks=64, seqs=3, budget=100, running=1, prompts=[5, 5, 5])),
    ("the budget ends it", dict(blocks=64, seqs=8, budget=12, running=0, prompts=[5, 5, 5])),
    ("the watermark", dict(blocks=12, seqs=8, budget=100, running=1, prompts=[9, 9], watermark=3)),
    ("the watermark, nothing running", dict(blocks=12, seqs=8, budget=100, running=0, prompts=[30, 9],
                                            watermark=3)),
    ("blocks keyed in the map", dict(blocks=64, seqs=8, budget=100, running=1, prompts=[5, 9, 13], keyed=True)),
])
def test_one_pass_admits_notes_and_counts_as_the_python_pass(case: str, kw: dict[str, Any], admitted: list[int],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each comparison of a pass, noted with its slack in the pool's and the seq cap's margins:
    the compiled pass leaves them as the Python pass does, admitting the same requests."""
    monkeypatch.setattr(waiting_pass, "PLAIN", None)
    compiled, python = one_pass("compiled", **kw), one_pass("python", **kw)
    assert compiled == python, case
    assert admitted, "the compiled pass was not called"


def test_an_allocator_that_does_not_say_its_arithmetic_is_plain_gets_the_python_pass(
        admitted: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A subclass of the paged allocator may count blocks otherwise: not plain, handed back."""
    from sim.kv.paged import PagedAllocator

    class Counting(PagedAllocator):
        pass

    assert PagedAllocator.plain_admission and not Counting.plain_admission
    monkeypatch.setattr(waiting_pass, "PLAIN", None)
    kw: dict[str, Any] = dict(blocks=64, seqs=8, budget=100, running=1, prompts=[5, 9], kv_type=Counting)
    assert one_pass("compiled", **kw) == one_pass("python", **kw)
    assert admitted and set(admitted) == {-1}


def nothing_case(which: str, *, blocks: int, seqs: int, running: int, head: Any, budget: int = 100,
                 watermark: int = 0, full_isl: bool = True) -> Any:
    """``admits_nothing`` with ``running`` requests admitted first: its answer and the margins."""
    from sim.kv.paged import PagedAllocator
    from sim.sched.admission import Admission
    from sim.sched.plan import StepPlan
    from sim.sched.scheduler import Scheduler
    from tests.helpers import req

    kv = PagedAllocator(blocks, 4)
    sched = Scheduler(kv, max_num_seqs=seqs, max_num_batched_tokens=1 << 20,
                      admission=Admission(reserve_full_isl=full_isl, watermark_blocks=watermark))
    for i in range(running):
        sched.add(req(100 + i, 4))
    waiting_pass.admit(sched, StepPlan(), 1 << 20, 0.0, 0)
    waiting_pass.NOTHING = waiting_pass._C.nothing if which == "compiled" else None  # type: ignore[union-attr]
    said = waiting_pass.admits_nothing(sched, head() if head is not None else None, budget)
    m, s = kv.headroom, sched.seq_margin
    return said, (m.fail_max, m.pass_min), (s.fail_max, s.pass_min)


@pytest.mark.parametrize(("case", "kw", "expect"), [
    ("no head", dict(blocks=12, seqs=8, running=1, head=None), True),
    ("no budget", dict(blocks=12, seqs=8, running=1, head=lambda: req_(9), budget=0), True),
    ("the seq cap", dict(blocks=64, seqs=2, running=2, head=lambda: req_(9)), True),
    ("fits", dict(blocks=12, seqs=8, running=1, head=lambda: req_(9)), False),
    ("no blocks", dict(blocks=12, seqs=8, running=1, head=lambda: req_(60)), True),
    ("the watermark", dict(blocks=12, seqs=8, running=1, head=lambda: req_(33), watermark=3), True),
    ("prompt content", dict(blocks=12, seqs=8, running=1, head=lambda: req_(60, content=True)), False),
    ("no full-ISL reserve", dict(blocks=12, seqs=8, running=1, head=lambda: req_(60), full_isl=False), False),
])
def test_admits_nothing_answers_and_notes_as_the_python(case: str, kw: dict[str, Any], expect: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    require_built(waiting_pass.PLAIN, "sim/sched/_admit.c")
    monkeypatch.setattr(waiting_pass, "NOTHING", None)
    compiled, python = nothing_case("compiled", **kw), nothing_case("python", **kw)
    assert compiled == python and compiled[0] is expect, case


def req_(prompt: int, content: bool = False) -> Any:
    from tests.helpers import req

    return req(50, prompt, ids=tuple(range(prompt)) if content else None)
