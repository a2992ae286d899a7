"""A run holds the cyclic collector back and gives it back as it found it; so does building a
trace's requests."""

from __future__ import annotations

import gc

import pytest

from sim.collector import GEN0, fewer_collections, paused
from sim.config import make_config
from sim.io.ingest import make_requests
from sim.run.simulate import simulate


def test_inside_a_run_what_exists_is_frozen_and_gen0_waits_longer() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with fewer_collections():
        assert gc.get_threshold()[0] == max(GEN0, before[0])
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_settle_freezes_what_was_built_inside_and_all_is_thawed_after() -> None:
    with fewer_collections() as settle:
        built = [[i] for i in range(1000)]  # a run's requests, say: they live through it
        assert all(gc.is_tracked(x) for x in built)
        frozen = gc.get_freeze_count()
        settle()
        assert gc.get_freeze_count() >= frozen + len(built)
    assert gc.get_freeze_count() == 0


def test_a_run_walks_none_of_its_requests(bundled_trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """The requests are built inside the run's hold and settled before it starts: no collection
    during the run finds one of them young (collections as often as CPython's default, here)."""
    from sim import collector
    from sim.request import Request
    from sim.run import simulate as sim_run

    monkeypatch.setattr(sim_run, "fewer_collections", lambda: collector.fewer_collections(gen0=1))

    young: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            young.append(sum(type(o) is Request for o in gc.get_objects(generation=0)))

    gc.callbacks.append(count)
    try:
        simulate(make_config(model="llama-3.1-8b", gpu="h100"), bundled_trace)
    finally:
        gc.callbacks.remove(count)
    assert young and not any(young)


def test_the_collector_is_given_back_when_the_run_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a run that fails")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_objects_the_process_froze_itself_stay_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is frozen or thawed then. (Counting frozen objects before and after is not a test
    of that: another thread of the process, pytest-xdist's, may free a frozen object meanwhile.)"""
    from sim import collector

    calls: list[str] = []
    gc.freeze()
    try:
        monkeypatch.setattr(collector.gc, "freeze", lambda: calls.append("freeze"))
        monkeypatch.setattr(collector.gc, "unfreeze", lambda: calls.append("unfreeze"))
        with fewer_collections():
            assert gc.get_threshold()[0] >= GEN0
        assert calls == []
        assert gc.get_freeze_count() > 0
    finally:
        monkeypatch.undo()
        gc.unfreeze()


def test_simulate_leaves_the_collector_as_it_was(bundled_trace) -> None:
    before = gc.get_threshold()
    res = simulate(make_config(model="llama-3.1-8b", gpu="h100"), bundled_trace)
    assert len(res.requests) == len(bundled_trace.df)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_turns_collection_off_and_gives_back_what_it_found(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.raises(RuntimeError), paused():
            assert not gc.isenabled()
            raise RuntimeError("a build that fails")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_requests_are_built_without_collections_and_the_collector_is_back_after(bundled_trace,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.request import Request

    seen: list[bool] = []
    init = Request.__init__

    def spy(self: Request, *a: object, **k: object) -> None:
        seen.append(gc.isenabled())
        init(self, *a, **k)

    monkeypatch.setattr(Request, "__init__", spy)
    assert gc.isenabled()
    reqs = make_requests(bundled_trace, make_config(model="llama-3.1-8b", gpu="h100"))
    assert len(seen) == len(reqs) == len(bundled_trace.df)
    assert not any(seen)
    assert gc.isenabled()
