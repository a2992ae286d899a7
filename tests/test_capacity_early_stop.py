"""A capacity probe stops once its SLO verdict can only be "fail", and never otherwise."""

from __future__ import annotations

import pytest

from sim.cluster.replay import replay_fleet
from sim.cluster.slo import Slo, SloTarget, evaluate
from sim.fleet.candidate import Candidate
from sim.fleet.capacity import SearchSpec, search_seed
from sim.fleet.workload import at_qps, draw_window, to_trace
from workloads.schema import Trace

BASE = {"model": "llama-3.1-8b", "max_num_seqs": 64, "kv_memory": "4GiB", "max_model_len": 8192}
SLO = Slo((SloTarget("ttft", 0.99, 1.0), SloTarget("tpot", 0.9, 0.05)))


def test_early_stop_never_changes_a_verdict(bundled_trace: Trace) -> None:
    cfg = Candidate("h100", 1).config(BASE)
    window = draw_window(bundled_trace.df, 0, 0, 500, keep=1.0)
    skip = 50
    seen = {"passed": 0, "stopped": 0}
    for qps in (1.0, 2.0, 4.0, 8.0, 16.0, 64.0):
        trace = to_trace(at_qps(window, qps), "<window>")
        full = replay_fleet([cfg], trace, "round-robin")
        early = replay_fleet([cfg], trace, "round-robin", stop_on_fail=(SLO, skip))
        truth = evaluate(full.requests.iloc[skip:], SLO)
        verdict = evaluate(early.requests.iloc[skip:], SLO)
        assert verdict.passed == truth.passed, qps
        if truth.passed:
            seen["passed"] += 1
            assert not early.aborted   # a probe that passes is never stopped
            assert early.requests.equals(full.requests)
        if early.aborted:
            seen["stopped"] += 1
            assert not truth.passed
            assert early.requests["finish_s"].isna().sum() > 0   # it really stopped short
    assert seen["passed"] and seen["stopped"], f"the rates must cover both outcomes: {seen}"


@pytest.fixture(scope="module")
def seed_search() -> object:
    from tests.helpers import BUNDLED
    from workloads import load_trace

    df = load_trace(BUNDLED).df
    spec = SearchSpec(slo=SLO, base=BASE, q_start=16.0, q_min=0.25, q_max=64.0, iters=2, window=500)
    return search_seed(Candidate("h100", 1), spec, 0, df)


def test_probes_are_marked_stopped_early_only_when_failing(seed_search: object) -> None:
    probes = seed_search.probes  # type: ignore[attr-defined]
    assert any(p.stopped_early for p in probes) and any(p.passed for p in probes)
    for p in probes:
        assert isinstance(p.stopped_early, bool)
        if p.stopped_early:
            assert not p.passed
            # quantiles of what finished are kept (a lower bound), not dropped
            assert all(v == v for _, v in p.observed)


def test_capacity_is_the_highest_passing_probe(seed_search: object) -> None:
    s = seed_search
    passing = [p.qps for p in s.probes if p.passed]  # type: ignore[attr-defined]
    assert s.qps == max(passing) > 0  # type: ignore[attr-defined]
    assert all(p.qps > s.qps for p in s.probes if not p.passed)  # type: ignore[attr-defined]


def test_a_stopped_probe_is_the_same_with_exact_steps(bundled_trace: Trace) -> None:
    """A probe stops at one of the monitor's checks. Windows run ahead of the clock, so a static
    replica's windows end at each check: what had run when it stopped is what exact steps had
    run then, step for step (before, it was wherever the last window had ended)."""
    cfg = Candidate("h100", 1).config(BASE)
    window = draw_window(bundled_trace.df, 0, 0, 500, keep=1.0)
    in_windows = steps = 0
    for qps in (8.0, 16.0, 64.0):
        trace = to_trace(at_qps(window, qps), "<window>")
        ff = replay_fleet([cfg], trace, "round-robin", stop_on_fail=(SLO, 50))
        ex = replay_fleet([cfg.model_copy(update={"exact_steps": True})], trace, "round-robin",
                          stop_on_fail=(SLO, 50))
        assert ff.aborted and ex.aborted, qps
        assert ff.requests.equals(ex.requests) and ff.steps[0].equals(ex.steps[0]), qps
        assert ff.preemptions == ex.preemptions
        in_windows, steps = in_windows + ff.ff_steps, steps + len(ff.steps[0])
    assert in_windows > steps // 2, "most steps ran in windows: the test proves something"
