"""A window step's landing (:func:`sim.engine.fastforward.steps.land`) leaves what the frames do
not show as ``--exact-steps`` leaves it: the step count and busy time, each request's state (a
finished request's token seen: ``pending_output`` 0) and the replica's finished list, in order
(what a fleet's replay counts to know it is done); and a scheduler subclass's ``finish`` is the
one a window's landing calls."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from sim.request import Request
from sim.sched.scheduler import Scheduler
from tests.helpers import conv_slice

CONFIGS = {
    "async": dict(max_model_len=4096, num_gpu_blocks=1500),
    "sync": dict(max_model_len=4096, num_gpu_blocks=700, async_scheduling=False),
}


def kept(into: list[Any], make: Any, *args: Any, **kw: Any) -> Any:
    """``make(*args, **kw)``, also appended to ``into``."""
    into.append(make(*args, **kw))
    return into[-1]


@pytest.mark.parametrize("name", CONFIGS)
def test_the_counters_and_the_requests_state_are_the_exact_steps(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.config import make_config
    from sim.io.ingest import make_requests
    from sim.run import simulate as sim_run
    from sim.run.simulate import new_replica, simulate

    trace, seen = conv_slice(200, 4.0), []
    for exact in (False, True):
        cfg = make_config(**CONFIGS[name], exact_steps=exact)
        reqs, reps = make_requests(trace, cfg), []
        monkeypatch.setattr(sim_run, "new_replica", partial(kept, reps, new_replica))
        res = simulate(cfg, trace, requests=reqs)
        seen.append((res.summary.num_steps, res.summary.busy_fraction,
                     [(r.pending_output, r.num_tokens, r.num_computed_tokens, r.seq) for r in reqs],
                     [r.uid for r in reps[0].finished]))
        if not exact:
            assert res.summary.fast_forward_steps > 0
    assert seen[0] == seen[1] and len(seen[0][-1]) > 150


def test_a_schedulers_own_finish_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hooks a subclass overrides run in a window as in exact steps (no compiled finish
    goes past them)."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    calls: list[int] = []
    finish = Scheduler.finish

    def counting(self: Scheduler, done: list[Request], end: float, step: int) -> None:
        calls.append(len(done))
        finish(self, done, end, step)

    monkeypatch.setattr(Scheduler, "finish", counting)
    res = simulate(make_config(**CONFIGS["async"]), conv_slice(200, 4.0))
    assert res.summary.fast_forward_steps > 0 and sum(calls) == (res.requests.status == "finished").sum() > 150
