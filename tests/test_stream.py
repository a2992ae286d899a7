"""The streamed and summary-only result paths give the in-memory path's rows and figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import sim.io.stream as stream
from sim.config import make_config
from sim.io.records import StepLog, StepRecord
from sim.run.simulate import simulate
from workloads.schema import Trace

SMALL = {"model": "llama-3.1-8b", "gpu": "a100-80gb", "kv_memory": "2GiB", "max_num_seqs": 64,
         "max_model_len": 8192, "seed": 7}   # a small pool: the slice preempts


def _summary(res: Any) -> dict[str, Any]:
    d = res.summary.to_json()
    d.pop("timings")
    return d


@pytest.mark.parametrize("chunk", [None, 97])  # the default (one chunk here) and many odd-sized ones
def test_streamed_run_writes_the_in_memory_rows_and_summary(bundled_trace: Trace, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             chunk: int | None) -> None:
    if chunk:
        monkeypatch.setattr(stream, "CHUNK", chunk)
    cfg = make_config(**SMALL)
    full = simulate(cfg, bundled_trace)
    full.write(tmp_path / "full")
    st = simulate(cfg, bundled_trace, stream_to=tmp_path / "stream")
    assert st.tables == "streamed" and len(st.steps) == 0
    assert full.summary.preemptions > 0 and full.summary.num_steps > 2 * (chunk or 1)
    for name in ("requests.parquet", "steps.parquet"):
        a, b = pd.read_parquet(tmp_path / "full" / name), pd.read_parquet(tmp_path / "stream" / name)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert _summary(st) == _summary(full)


def test_summary_only_gives_the_same_percentiles_and_summary(bundled_trace: Trace,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK", 50)
    for kw in (SMALL, {**SMALL, "allocator": "slab"}, {**SMALL, "async_scheduling": False}):
        cfg = make_config(**kw)
        full, lean = simulate(cfg, bundled_trace), simulate(cfg, bundled_trace, summary_only=True)
        assert lean.tables == "summary"
        for lat in ("ttft_s", "tpot_s", "e2e_s"):
            assert getattr(lean.summary, lat) == getattr(full.summary, lat)
        assert _summary(lean) == _summary(full)
        # the lean request columns are the full frame's, value for value
        cols = list(lean.requests.columns)
        pd.testing.assert_frame_equal(lean.requests, full.requests[cols], check_exact=True,
                                      check_dtype=False, check_categorical=False)


def test_summary_only_writes_only_the_summary(bundled_trace: Trace, tmp_path: Path) -> None:
    res = simulate(make_config(**SMALL), bundled_trace, summary_only=True)
    res.write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_sink_empties_the_log_in_place_and_keeps_its_append() -> None:
    log = StepLog()
    sink = stream.StepSink(None, block_size=16, chunk=4)
    append = log.append   # the engine binds this once
    for i in range(10):
        append(StepRecord(i, 0.01 * i, 0.01, 1, 0, 5, 0, 0, 10, 5, 0, 11 + i, 0, 144 - i, 0, 0, 0))
        sink.maybe_drain(log)
        assert len(log) < 4
    stats = sink.close(log, paged=True)
    assert stats.num_steps == 10 and not len(log)
    assert stats.held_slots_peak == 5 + 11 + 9


def test_an_empty_run_streams_empty_tables(tmp_path: Path) -> None:
    from tests.conftest import make_trace

    tr = make_trace([{"request_id": "a", "arrival_s": 0.0, "prompt_tokens": 10**6, "output_tokens": 4}])
    cfg = make_config(**SMALL)
    full = simulate(cfg, tr)
    st = simulate(cfg, tr, stream_to=tmp_path)
    got = pd.read_parquet(tmp_path / "requests.parquet")
    assert list(got["status"]) == ["rejected"] and len(pd.read_parquet(tmp_path / "steps.parquet")) == 0
    assert _summary(st) == _summary(full)
    assert dataclasses.asdict(st.summary.load) == dataclasses.asdict(full.summary.load)


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding-tokens"])
def test_streamed_fleet_matches_the_routed_replay(bundled_trace: Trace, tmp_path: Path, router: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.cluster.replay import replay_fleet
    from sim.cluster.stream_replay import replay_streamed
    from sim.io.summary import Percentiles

    monkeypatch.setattr(stream, "CHUNK", 300)
    cfgs = [make_config(**SMALL)] * 3
    ref = replay_fleet(cfgs, bundled_trace, router)
    got = replay_streamed(cfgs, bundled_trace, router, tmp_path)
    done = ref.requests[ref.requests["status"] == "finished"]
    for lat in ("ttft_s", "tpot_s", "e2e_s"):
        assert getattr(got, lat) == Percentiles.of(done[lat])
    rows = pd.read_parquet(tmp_path / "requests.parquet")
    rows["replica"] = pd.read_parquet(tmp_path / "replica.parquet")["replica"]
    want = ref.requests.copy()
    want.to_parquet(tmp_path / "ref.parquet", index=False)
    pd.testing.assert_frame_equal(rows, pd.read_parquet(tmp_path / "ref.parquet"), check_exact=True)
    for i, steps in enumerate(ref.steps):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"steps-{i}.parquet"), steps, check_exact=True)
        assert got.steps[i].num_steps == len(steps)
    assert got.requests_per_replica == tuple(ref.requests.groupby("replica").size())


def test_cli_summary_only_and_stream(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from sim.cli.main import _load, app

    _load()
    runner = CliRunner()
    for flag, name in (("--summary-only", "lean"), ("--stream", "streamed"), (None, "full")):
        args = ["simulate", "--out", str(tmp_path / name), "--kv-memory", "2GiB", "--max-num-seqs", "64",
                "--max-model-len", "8192"]
        r = runner.invoke(app, args + ([flag] if flag else []))
        assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "lean").iterdir()) == ["summary.json"]

    def summary(name: str) -> dict[str, object]:
        d = json.loads((tmp_path / name / "summary.json").read_text())
        d.pop("timings")
        return d

    assert summary("lean") == summary("full") == summary("streamed")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "streamed" / "requests.parquet"),
                                  pd.read_parquet(tmp_path / "full" / "requests.parquet"), check_exact=True)


def test_a_long_window_still_drains_its_records(bundled_trace: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A streamed run holds at most a chunk plus PROGRESS_EVERY step records, even when one
    fast-forward window spans many chunks (the default config on the slice: few, long ones)."""
    import sim.engine.fastforward.window as window

    monkeypatch.setattr(stream, "CHUNK", 64)
    monkeypatch.setattr(window, "PROGRESS_EVERY", 128)
    seen: list[int] = []
    drain = stream.StepSink.maybe_drain

    def watch(self: stream.StepSink, log: StepLog) -> None:
        seen.append(len(log))
        drain(self, log)

    monkeypatch.setattr(stream.StepSink, "maybe_drain", watch)
    res = simulate(make_config(max_model_len=8192), bundled_trace, summary_only=True)
    exact = res.summary.num_steps - res.summary.fast_forward_steps  # about one per window
    assert res.summary.num_steps > 4 * (64 + 128) * max(exact, 1), "no long window: proves nothing"
    assert max(seen) <= 64 + 128


def test_streamed_fleet_is_the_same_with_lazy_reads_off(bundled_trace: Trace, tmp_path: Path) -> None:
    """``lazy_reads=False`` (every replica pauses at every arrival: bench_day --compare-pausing)
    writes the same rows as the default, where quiet runs answer the router from their arrays."""
    from sim.cluster.stream_replay import replay_streamed

    cfgs = [make_config(**SMALL)] * 3
    lazy = replay_streamed(cfgs, bundled_trace, "least-outstanding-tokens", tmp_path / "lazy")
    paused = replay_streamed(cfgs, bundled_trace, "least-outstanding-tokens", tmp_path / "paused", lazy_reads=False)
    assert (lazy.num_steps, lazy.ttft_s, lazy.e2e_s) == (paused.num_steps, paused.ttft_s, paused.e2e_s)
    for name in ["requests.parquet", "replica.parquet", *(f"steps-{i}.parquet" for i in range(3))]:
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "lazy" / name),
                                      pd.read_parquet(tmp_path / "paused" / name), check_exact=True)


def _rec(i: int) -> StepRecord:
    return StepRecord(i, 0.5 * i, 0.25, 1, 0, 0, 1, 0, 100 - i, i, 0, 0, 16, 0, 0, 0, 0)


def test_step_log_keeps_step_order_across_tuples_and_run_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tuples are converted only when the log is read; a run's records stay after the tuples
    appended before it, in step order, and ``frame`` does not empty the log."""
    import numpy as np

    from sim.io.records import STEP_DTYPE, concat_steps

    def run(steps: range) -> np.ndarray:
        return np.array([tuple(_rec(i)) for i in steps], dtype=STEP_DTYPE)

    def defer(log: StepLog, records: np.ndarray) -> None:  # a run's records, laid out as they are
        log.defer(concat_steps, records, len(records))

    log = StepLog()
    for i in range(3):
        log.append(_rec(i))
    defer(log, run(range(3, 6)))
    defer(log, run(range(6, 8)))
    log.append(_rec(8))
    defer(log, run(range(9, 12)))
    log.append(_rec(12))
    assert len(log) == 13
    assert list(log.frame()["step"]) == list(range(13))   # frame reads without emptying
    log.append(_rec(13))
    assert len(log) == 14 and log.take()["step"].tolist() == list(range(14))
    assert len(log) == 0 and log.take() is None
    monkeypatch.setattr(StepLog, "FOLD_AT", 2)            # at most FOLD_AT tuples are held across a run
    for i in range(3):
        log.append(_rec(i))
    defer(log, run(range(3, 4)))
    assert not log.rows and len(log) == 4 and log.take()["start_s"].tolist() == [0.0, 0.5, 1.0, 1.5]
