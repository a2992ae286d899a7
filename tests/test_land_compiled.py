"""A window step landed by the compiled call (``_quiet_steps.land``) is the window's own.

``steps.land`` is the reference. Each run goes both ways -- ``steps.COMPILED_LAND`` set and None
-- and every request, step record and freed table must be the same, on configurations that
reach each part of a landing: finishes (sync and async, where a finished request's last block
is registered as its token is seen), preemptions (a small pool), no prefix caching. The runs
count the compiled landings, so that a test cannot pass by never calling it. Skipped, with the
reason, where the extension was not built.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from sim.engine.fastforward import steps
from tests.helpers import conv_slice, require_built, same_either_way


@pytest.fixture
def landed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of finished requests of each compiled landing."""
    require_built(steps.COMPILED_LAND, "sim/engine/fastforward/_quiet_steps.c")
    seen: list[int] = []
    compiled = steps.COMPILED_LAND

    def counting(k: Any, lag: int, plan: Any, batch: Any, dt: float, start: float, done: list[Any],
                 computed: int, nw: int) -> None:
        seen.append(len(done))
        compiled(k, lag, plan, batch, dt, start, done, computed, nw)  # type: ignore[misc]

    monkeypatch.setattr(steps, "_COUNTING", counting, raising=False)
    return seen


def lands(which: str) -> Any:
    return getattr(steps, "_COUNTING", None) if which == "compiled" else None


CONFIGS = {
    "async": dict(max_model_len=4096, num_gpu_blocks=1500),
    "async-tight-pool": dict(max_model_len=4096, num_gpu_blocks=300, max_num_seqs=64),  # preempts
    "sync": dict(max_model_len=4096, num_gpu_blocks=700, async_scheduling=False),
    "async-no-caching": dict(max_model_len=4096, num_gpu_blocks=700, enable_prefix_caching=False),
    "async-block-8": dict(max_model_len=4096, num_gpu_blocks=2000, block_size=8, max_num_seqs=32),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_a_replica_is_the_same_with_and_without_the_compiled_landing(
        name: str, landed: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = same_either_way(monkeypatch, (steps, "COMPILED_LAND"), lands, conv_slice(200, 4.0), **CONFIGS[name])
    assert run.summary.fast_forward_steps > 0
    assert len(landed) > 0 and sum(landed) > 0, "no compiled landing finished a request: the test proves nothing"


def test_the_tight_pool_preempts_and_a_slab_keeps_the_python_landing(landed: list[int],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = same_either_way(monkeypatch, (steps, "COMPILED_LAND"), lands, conv_slice(200, 4.0),
                             **CONFIGS["async-tight-pool"])
    assert run.summary.preemptions > 0 and landed
    landed.clear()
    same_either_way(monkeypatch, (steps, "COMPILED_LAND"), lands, conv_slice(60, 4.0), max_model_len=4096,
                    allocator="slab")
    assert not landed, "a slab's breakdown is not linear: Python's landing"


@pytest.mark.parametrize("name", ["async", "sync"])
def test_the_counters_and_the_requests_state_are_the_pythons(name: str, landed: list[int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """What the frames do not show: the kernel's step counters (the summary's), each request's
    state (a finished request's token is seen: pending_output 0) and the replica's finished
    list, in order (what a fleet's replay counts to know it is done)."""
    from sim.config import make_config
    from sim.io.ingest import make_requests
    from sim.run import simulate as sim_run
    from sim.run.simulate import new_replica, simulate

    cfg, trace = make_config(**CONFIGS[name]), conv_slice(200, 4.0)
    seen = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(steps, "COMPILED_LAND", lands(which))
        reqs, reps = make_requests(trace, cfg), []
        monkeypatch.setattr(sim_run, "new_replica", partial(kept, reps, new_replica))
        res = simulate(cfg, trace, requests=reqs)
        seen.append((res.summary.fast_forward_steps, res.summary.num_steps, res.summary.busy_fraction,
                     [(r.pending_output, r.num_tokens, r.num_computed_tokens, r.seq) for r in reqs],
                     [r.uid for r in reps[0].finished]))
    assert seen[0] == seen[1] and landed and len(seen[0][-1]) > 150


def kept(into: list[Any], make: Any, *args: Any, **kw: Any) -> Any:
    """``make(*args, **kw)``, also appended to ``into``."""
    into.append(make(*args, **kw))
    return into[-1]


def test_a_landing_refuses_what_it_cannot_read() -> None:
    require_built(steps.COMPILED_LAND, "sim/engine/fastforward/_quiet_steps.c")
    with pytest.raises(TypeError, match="land"):
        steps.COMPILED_LAND(None, 0, None, (0,), 0.1, 0.0, [], 0, 0)  # type: ignore[misc]
