"""A window's quiet steps taken in one call (:class:`~sim.engine.fastforward.quiet_steps.QuietSteps`)
are ``--exact-steps``' steps: every request, step record and freed table the same, on
configurations that reach each place where the call stops and hands a step back to the window:
finishes, arrivals due, preemptions (a small pool), a live router's reads (pausable windows),
the progress hook's record budget, sync registrations, async ones, no prefix caching. The runs
also count the steps the call took, so that a test cannot pass by never calling it. (Compiled
by Cython or run as Python, it is the same source: CI runs this file both ways.)
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from sim.engine.fastforward import quiet_steps, window
from tests.helpers import assert_fast_forward_identical, conv_slice


class Counting:
    """A window's :class:`QuietSteps`, the steps each ``take`` took appended to ``seen``."""

    def __init__(self, quick: quiet_steps.QuietSteps, seen: list[int]) -> None:
        self.quick, self.seen = quick, seen

    def take(self, *a: Any) -> tuple[Any, ...]:
        out = self.quick.take(*a)
        self.seen.append(out[0])
        return out

    def boundary(self, s1: int) -> int:
        return self.quick.boundary(s1)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps each call took."""
    seen: list[int] = []

    def counting(*a: Any) -> Counting | None:
        quick = quiet_steps.bind(*a)
        return Counting(quick, seen) if quick is not None else None

    monkeypatch.setattr(window, "bind", counting)
    return seen


CONFIGS = {
    "async-caching": dict(max_model_len=8192, num_gpu_blocks=1500),
    "async-tight-pool": dict(max_model_len=8192, num_gpu_blocks=700, max_num_seqs=64),  # preempts
    "sync-caching": dict(max_model_len=8192, num_gpu_blocks=1500, async_scheduling=False),
    "sync-no-caching": dict(max_model_len=8192, num_gpu_blocks=900, async_scheduling=False,
                            enable_prefix_caching=False),
    "async-block-8": dict(max_model_len=8192, num_gpu_blocks=2000, block_size=8, max_num_seqs=32),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_a_windows_quiet_steps_are_the_exact_steps(name: str, taken: list[int]) -> None:
    ff = assert_fast_forward_identical(CONFIGS[name], conv_slice(200, 4.0), check=True)
    assert ff.summary.fast_forward_steps > 0
    assert sum(taken) > 0, "the call took no step: the test proves nothing"
    assert max(taken) > 1, "no call took more than the step the window checked"


def test_the_progress_hooks_record_budget_stops_a_call(taken: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """With a progress hook, a call takes at most the records left before the hook is due; the
    records are those of a run without the hook."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    cfg, trace = make_config(max_model_len=8192, num_gpu_blocks=1500), conv_slice(150, 4.0)
    plain = simulate(cfg, trace)
    taken.clear()
    monkeypatch.setattr(window, "PROGRESS_EVERY", 3)
    hooked = simulate(cfg, trace, progress=lambda done, total: None)
    pd.testing.assert_frame_equal(plain.steps, hooked.steps, check_exact=True)
    pd.testing.assert_frame_equal(plain.requests, hooked.requests, check_exact=True)
    assert taken and max(taken) <= 3


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_a_fleet_behind_a_live_router_is_its_exact_steps(async_scheduling: bool, taken: list[int]) -> None:
    """Pausable windows: the router's next arrival bounds a call (``na``)."""
    from sim.cluster.replay import replay_fleet
    from sim.config import make_config

    runs = []
    for exact in (False, True):
        cfg = make_config(max_model_len=8192, num_gpu_blocks=900, async_scheduling=async_scheduling,
                          exact_steps=exact)
        runs.append(replay_fleet([cfg] * 3, conv_slice(240, 2.0), "least-outstanding-tokens"))
    ff, exact = runs
    pd.testing.assert_frame_equal(ff.requests, exact.requests, check_exact=True)
    for a, b in zip(ff.steps, exact.steps, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert ff.evictions == exact.evictions
    assert sum(taken) > 0, "the call took no step: the test proves nothing"


def test_an_observed_pool_sees_every_pop(taken: list[int]) -> None:
    """A pool whose operations are wrapped to be logged (``BlockPool.observed``, as a sweep's
    derivation does): the call hands its crossings to ``cross_boundary``, which pops through the
    wrapper -- in the quiet steps and at the boundaries of the other steps; the records are an
    unobserved run's."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    log: list[int] = []

    def observe(parts: Any) -> None:
        pool = parts.kv.pool
        pop = pool.get_new_blocks
        pool.get_new_blocks = lambda n: log.append(n) or pop(n)
        pool.observed = True

    cfg, trace = make_config(**CONFIGS["async-caching"]), conv_slice(200, 4.0)
    plain = simulate(cfg, trace)
    observed = simulate(cfg, trace, on_build=observe)
    assert len(log) > 100 and sum(taken) > 0
    pd.testing.assert_frame_equal(plain.steps, observed.steps, check_exact=True)
