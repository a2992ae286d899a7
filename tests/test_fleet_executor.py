"""Local process pool and Ray give the same capacity results (same seeds, same order)."""

from __future__ import annotations

import os

import pytest

from sim.cli.simulate import bundled_trace
from sim.cluster.slo import Slo, SloTarget
from sim.fleet.candidate import Candidate
from sim.fleet.capacity import SearchSpec
from sim.fleet.planner import _search_task
from sim.run.executor import run_tasks
from workloads import load_trace


def _tasks() -> list[tuple[Candidate, SearchSpec, int]]:
    slo = Slo((SloTarget("ttft", 0.9, 2.0),))
    spec = SearchSpec(slo=slo, base={"model": "llama-3.1-8b"}, q_start=5.0, q_min=0.1, q_max=500.0,
                      iters=1, window=300)
    return [(Candidate("h100", 1), spec, r) for r in range(2)]


def _qps(backend: str, workers: int) -> list[float]:
    df = load_trace(bundled_trace()).df
    return [s.qps for s in run_tasks(_search_task, _tasks(), df, backend=backend, workers=workers)]


def test_process_pool_matches_inline() -> None:
    assert _qps("local", 2) == _qps("local", 1)


@pytest.mark.ray
def test_ray_matches_local() -> None:
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    assert _qps("ray", 2) == _qps("local", 1)
