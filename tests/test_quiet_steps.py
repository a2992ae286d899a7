"""A window's quiet steps taken by the compiled call (``_quiet_steps.c``) are the window's own.

The window's Python quiet step is the reference (``sim/engine/fastforward/window.py``). Each
run here goes both ways -- ``quiet_steps.COMPILED`` set and None -- and every request, step
record and freed table must be the same, on configurations that reach each place where the
compiled call stops and hands a step back: finishes, arrivals due, preemptions (a small pool),
a live router's reads (pausable windows), the progress hook's record budget, sync
registrations, async ones, no prefix caching. The runs also count the steps the compiled call
took, so that a test cannot pass by never calling it. Skipped, with the reason, where the
extension was not built.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from sim.engine.fastforward import quiet_steps
from tests.helpers import conv_slice, require_built, same_either_way


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps each compiled call took (recorded while the compiled call is in use)."""
    require_built(quiet_steps.COMPILED, "sim/engine/fastforward/_quiet_steps.c")
    seen: list[int] = []
    take = quiet_steps.QuietSteps.take

    def counting(self: quiet_steps.QuietSteps, *a: Any) -> Any:
        out = take(self, *a)
        seen.append(out[0])
        return out

    monkeypatch.setattr(quiet_steps.QuietSteps, "take", counting)
    return seen


def loops(which: str) -> Any:
    return quiet_steps.COMPILED if which == "compiled" else None


CONFIGS = {
    "async-caching": dict(max_model_len=8192, num_gpu_blocks=1500),
    "async-tight-pool": dict(max_model_len=8192, num_gpu_blocks=700, max_num_seqs=64),  # preempts
    "sync-caching": dict(max_model_len=8192, num_gpu_blocks=1500, async_scheduling=False),
    "sync-no-caching": dict(max_model_len=8192, num_gpu_blocks=900, async_scheduling=False,
                            enable_prefix_caching=False),
    "async-block-8": dict(max_model_len=8192, num_gpu_blocks=2000, block_size=8, max_num_seqs=32),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_a_replica_is_the_same_with_and_without_the_compiled_quiet_steps(
        name: str, taken: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = same_either_way(monkeypatch, (quiet_steps, "COMPILED"), loops, conv_slice(200, 4.0), **CONFIGS[name])
    assert run.summary.fast_forward_steps > 0
    assert sum(taken) > 0, "the compiled call took no step: the test proves nothing"
    assert max(taken) > 1, "no call took more than the step the window checked"


def filling_pool() -> tuple[dict[str, Any], Any]:
    """Short prompts admitted at once, then long decodes that fill the pool to its last few
    blocks without preempting: the least slack a run passes is a decoder's crossing."""
    from tests.conftest import make_trace

    rows = [dict(request_id=str(i), arrival_s=0.0, prompt_tokens=20, output_tokens=290 + i) for i in range(24)]
    return (dict(max_model_len=1024, block_size=16, num_gpu_blocks=490, max_num_seqs=32, api_server_count=0),
            make_trace(rows))  # all at the engine at once: no API server staggering them


@pytest.mark.parametrize("name", ["async-tight-pool", "sync-caching", "filling-pool"])
def test_the_counters_and_margins_are_the_same_either_way(name: str, taken: list[int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What the records do not show: busy time, evictions, and the capacity margins a sweep
    reuses runs by (sim/kv/margin.py), which a quiet step notes for its crossings."""
    import sim.engine.fastforward.runs as runs
    from sim.config import make_config
    from sim.run.simulate import simulate

    cfg, trace = filling_pool() if name == "filling-pool" else (CONFIGS[name], conv_slice(200, 4.0))
    monkeypatch.setattr(runs, "MIN_RUN", 10**9)  # no run of quiet steps takes the crossings first
    seen = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(quiet_steps, "COMPILED", loops(which))
        parts: list[Any] = []
        res = simulate(make_config(**cfg), trace, on_build=parts.append)
        m = parts[0].kv.headroom
        seen.append((res.counters, res.summary.evictions, res.summary.busy_fraction, m.pass_min, m.fail_max))
    assert seen[0] == seen[1]
    assert sum(taken) > 0
    if name == "filling-pool":
        assert seen[0][0].preemptions == 0 and 0 <= seen[0][3] < 24, "not the scenario the test means"


def test_the_progress_hooks_record_budget_stops_a_call(taken: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """With a progress hook, a call takes at most the records left before the hook is due."""
    from sim.config import make_config
    from sim.engine.fastforward import window
    from sim.run.simulate import simulate

    monkeypatch.setattr(window, "PROGRESS_EVERY", 3)
    frames = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(quiet_steps, "COMPILED", loops(which))
        res = simulate(make_config(max_model_len=8192, num_gpu_blocks=1500), conv_slice(150, 4.0),
                       progress=lambda done, total: None)
        frames.append(res)
    pd.testing.assert_frame_equal(frames[0].steps, frames[1].steps, check_exact=True)
    pd.testing.assert_frame_equal(frames[0].requests, frames[1].requests, check_exact=True)
    assert taken and max(taken) <= 3


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_a_fleet_behind_a_live_router_is_the_same_either_way(
        async_scheduling: bool, taken: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Pausable windows: the router's next arrival bounds a call (``na``)."""
    from sim.cluster.replay import replay_fleet
    from sim.config import make_config

    cfg = make_config(max_model_len=8192, num_gpu_blocks=900, async_scheduling=async_scheduling)
    runs = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(quiet_steps, "COMPILED", loops(which))
        runs.append(replay_fleet([cfg] * 3, conv_slice(240, 2.0), "least-outstanding-tokens"))
    compiled, python = runs
    pd.testing.assert_frame_equal(compiled.requests, python.requests, check_exact=True)
    for a, b in zip(compiled.steps, python.steps, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert compiled.evictions == python.evictions
    assert sum(taken) > 0, "the compiled call took no step: the test proves nothing"


def test_bad_arguments_are_refused_before_a_step() -> None:
    require_built(quiet_steps.COMPILED, "sim/engine/fastforward/_quiet_steps.c")
    steps = quiet_steps.COMPILED.steps  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="steps"):
        steps((), 0)
    with pytest.raises(TypeError, match="steps"):
        steps((None,) * 3, *range(20))


def test_the_compiled_calls_records_are_out_of_the_collectors_sight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Numbers only, never in a cycle: untracked at once, as the collector would untrack them
    at its first walk (sim/collector.py says why the young objects of a run matter)."""
    import gc

    from sim.config import make_config
    from sim.run.simulate import simulate

    require_built(quiet_steps.COMPILED, "sim/engine/fastforward/_quiet_steps.c")
    seen: list[bool] = []
    take = quiet_steps.QuietSteps.take

    def checking(self: quiet_steps.QuietSteps, *a: Any) -> Any:
        out = take(self, *a)
        rows = self.fixed[5].__self__  # the log's list of tuples (its bound append)
        seen.extend(gc.is_tracked(r) for r in rows[len(rows) - out[0]:])
        return out

    monkeypatch.setattr(quiet_steps.QuietSteps, "take", checking)
    simulate(make_config(**CONFIGS["async-caching"]), conv_slice(200, 4.0))
    assert seen and not any(seen)


@pytest.mark.parametrize("name", ["async-caching", "sync-caching"])
def test_runs_of_quiet_steps_are_taken_where_the_window_would_take_them(
        name: str, taken: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled call hands a step back where a run may start (held True, no decoder finishing
    within a run's length, the next arrival far enough): the same runs either way. (Runs give
    the same records as steps, so only their count tells.)"""
    import sim.engine.fastforward.runs as runs
    from sim.config import make_config
    from sim.run.simulate import simulate

    monkeypatch.setattr(runs, "MIN_RUN", 3)
    commits: list[tuple[int, ...]] = []
    commit = runs.QuietRuns._commit

    def counting(self: Any, *a: Any) -> Any:
        commits.append(a[:2])
        return commit(self, *a)

    monkeypatch.setattr(runs.QuietRuns, "_commit", counting)
    seen = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(quiet_steps, "COMPILED", loops(which))
        commits.clear()
        res = simulate(make_config(**CONFIGS[name]), conv_slice(200, 1.0))
        seen.append((list(commits), res.steps))
    assert seen[0][0] == seen[1][0] and len(seen[0][0]) > 0
    pd.testing.assert_frame_equal(seen[0][1], seen[1][1], check_exact=True)
    assert sum(taken) > 0


def test_an_observed_pool_sees_every_pop_either_way(taken: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool whose operations are wrapped to be logged (``BlockPool.observed``, as a sweep's
    derivation does): the compiled calls hand its crossings to the Python path, which pops
    through the wrapper -- in the quiet steps and at the boundaries of the other steps."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    logs = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(quiet_steps, "COMPILED", loops(which))
        log: list[int] = []

        def observe(parts: Any, log: list[int] = log) -> None:
            pool = parts.kv.pool
            pop = pool.get_new_blocks
            pool.get_new_blocks = lambda n: log.append(n) or pop(n)
            pool.observed = True

        res = simulate(make_config(**CONFIGS["async-caching"]), conv_slice(200, 4.0), on_build=observe)
        logs.append((log, res.steps))
    assert logs[0][0] == logs[1][0] and len(logs[0][0]) > 100
    pd.testing.assert_frame_equal(logs[0][1], logs[1][1], check_exact=True)
