"""A run turns automatic collection off and gives the collector back as it found it; so does
building a trace's requests."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from sim.collector import no_collections, paused
from sim.config import make_config
from sim.io.ingest import make_requests
from sim.run.simulate import simulate


def test_inside_a_run_nothing_is_collected_and_what_exists_is_frozen() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert gc.isenabled()
    with no_collections():
        assert not gc.isenabled()
        assert gc.get_freeze_count() > frozen
    assert gc.isenabled()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_settle_freezes_what_was_built_inside_and_all_is_thawed_after() -> None:
    with no_collections() as settle:
        built = [[i] for i in range(1000)]  # a run's requests, say: they live through it
        assert all(gc.is_tracked(x) for x in built)
        frozen = gc.get_freeze_count()
        settle()
        assert gc.get_freeze_count() >= frozen + len(built)
    assert gc.get_freeze_count() == 0


def test_no_automatic_collection_starts_while_the_engine_runs(bundled_trace) -> None:
    """With a collection due every allocation (threshold 1), none starts between the run's first
    step and its last; the collector works as before once the run is over."""
    started: list[int] = []
    seen: list[int] = []  # collections started so far, at each step

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(info["generation"])

    before = gc.get_threshold()
    gc.callbacks.append(count)
    try:
        gc.set_threshold(1, 1, 1)
        simulate(make_config(model="llama-3.1-8b", gpu="h100", exact_steps=True), bundled_trace,
                 on_step=lambda _rep: seen.append(len(started)))
        after = len(started)
        _ = [[i] for i in range(100)]  # allocations: collections are due again
        assert len(started) > after
    finally:
        gc.set_threshold(*before)
        gc.callbacks.remove(count)
    assert len(seen) > 100
    assert seen[0] == seen[-1]


def test_the_collector_is_given_back_when_the_run_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), no_collections():
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
        with no_collections():
            assert not gc.isenabled()
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
    import sim.io.ingest
    from sim.request import Request

    seen: list[bool] = []

    class Spy(Request):  # (Request is an extension type compiled: its __init__ is not patched)
        def __init__(self, *a: Any, **k: Any) -> None:
            seen.append(gc.isenabled())
            super().__init__(*a, **k)

    monkeypatch.setattr(sim.io.ingest, "Request", Spy)
    assert gc.isenabled()
    reqs = make_requests(bundled_trace, make_config(model="llama-3.1-8b", gpu="h100"))
    assert len(seen) == len(reqs) == len(bundled_trace.df)
    assert not any(seen)
    assert gc.isenabled()
