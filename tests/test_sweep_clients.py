"""Closed-loop clients in a sweep (issue 49, item 1): ``--max-concurrency`` on every point and
``max_concurrency`` as a sweep key; resume and derivation keep client counts apart; ``plan``
refuses it; ``summary.json`` records it.

The trace is a burst of 40 requests at t = 0 on a constant step cost (0.01 s), so the clients,
not the trace's times, set the pace: one client sends them one after another, four batch them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli.main import _load, app
from sim.config import make_config
from sim.errors import ConfigError
from sim.run.clients import ClientSpec
from sim.run.simulate import simulate
from sim.sweep import PROVENANCE_COLUMNS, TIMING_COLUMNS, expand, point_key, run_point, run_sweep
from sim.sweep import derive as derive_mod
from sim.sweep.derive import derive, run_base
from sim.sweep.driver import classes
from sim.sweep.reuse import fresh_requests
from sim.sweep.worker import run_points
from tests.conftest import make_trace
from workloads import load_trace

_load()
BASE = {"cost_model": "constant:0.01", "api_server_count": 0, "enable_prefix_caching": False}


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workloads.writer import write_trace

    rng = np.random.default_rng(7)
    tr = make_trace([dict(arrival_s=0.0, prompt_tokens=int(p), output_tokens=int(o))
                     for p, o in zip(rng.integers(32, 256, 40), rng.integers(4, 24, 40), strict=True)])
    path = tmp_path_factory.mktemp("burst") / "burst.parquet"
    write_trace(tr.df, path)
    return path


def in_flight(req: pd.DataFrame) -> np.ndarray:
    """Requests in flight after each send or finish ([send, finish): a finish at t frees first)."""
    t = np.concatenate((req["arrival_s"], req["finish_s"]))
    d = np.concatenate((np.ones(len(req)), -np.ones(len(req))))
    return np.cumsum(d[np.lexsort((d, t))])


def differ(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Keys whose values differ (NaN and NA equal themselves), timings and provenance aside."""
    skip = {*TIMING_COLUMNS, *PROVENANCE_COLUMNS}
    return [k for k in a if k not in skip and not (a[k] == b.get(k) or (pd.isna(a[k]) and pd.isna(b.get(k))))]


def test_a_sweep_over_clients_runs_each_point_closed_loop(burst: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's own runs (seen through the simulate call it makes) keep at most N in flight and
    reach N; the open-loop point sends all 40 at once; throughput rises from 1 to 4 clients."""
    seen: list[tuple[int | None, pd.DataFrame]] = []
    real = derive_mod.simulate

    def spy(*a: Any, **kw: Any) -> Any:
        res = real(*a, **kw)
        seen.append((kw["clients"].max_concurrency, res.requests))
        return res

    monkeypatch.setattr(derive_mod, "simulate", spy)
    points = expand({"max_concurrency": [1, 4, None]}, BASE, burst)
    rows = {r.get("max_concurrency"): r for r in run_points(points)}
    assert sorted(str(n) for n, _ in seen) == ["1", "4", "None"]
    for n, req in seen:
        flight = in_flight(req)
        assert len(req) == 40 and (req["status"] == "finished").all()
        assert flight.max() == (n or 40), n
    assert all(r["status"] == "ok" for r in rows.values())
    assert rows[4]["throughput_rps"] > 2.5 * rows[1]["throughput_rps"]
    assert rows[None]["throughput_rps"] > rows[4]["throughput_rps"]
    # the row is the run simulate gives with the same clients, field for field
    for n in (1, 4):
        want = simulate(make_config(**BASE), load_trace(burst), clients=ClientSpec(n), summary_only=True).summary
        assert not differ(want.flat(), rows[n]), differ(want.flat(), rows[n])


def test_client_counts_are_separate_points_resumed_apart(burst: Path, tmp_path: Path) -> None:
    points = expand({"max_concurrency": [1, 4, None], "block_size": [16, 32]}, BASE, burst)
    assert len({p.key for p in points}) == 6
    open_loop = [p for p in points if p.max_concurrency is None]
    assert all(p.key == point_key(p.config, p.trace_hash) for p in open_loop)  # keys of older sweeps kept
    assert all(len({p.max_concurrency for p in task}) == 1 for task in classes(points, 1))
    first = run_sweep(points, tmp_path / "sw", jobs=1)
    assert (first.ran, first.skipped) == (6, 0)
    t = first.table
    assert str(t["max_concurrency"].dtype) == "Int64" and t["max_concurrency"].isna().sum() == 2
    assert sorted(t["max_concurrency"].dropna().tolist()) == [1, 1, 4, 4]
    by = t.groupby(t["max_concurrency"].fillna(0))["throughput_rps"]
    assert by.max()[1] < by.min()[4] and by.max()[4] < by.min()[0]   # 1 client < 4 < open loop, either block size
    again = run_sweep(expand({"max_concurrency": [1, 4, 8]}, BASE, burst), tmp_path / "sw", jobs=1)
    assert (again.ran, again.skipped) == (1, 2)   # 8 clients is new; 1 and 4 (block 16) were recorded
    assert len(again.table) == 7 and 8 in again.table["max_concurrency"].tolist()


def test_a_base_derives_only_for_its_own_clients(burst: Path) -> None:
    tr = load_trace(burst)
    cfg = make_config(**BASE, gpu_memory_utilization=0.95)
    smaller = make_config(**BASE, gpu_memory_utilization=0.9)
    _, base = run_base(cfg, tr, fresh_requests(tr, cfg), ClientSpec(4))
    assert base is not None
    assert derive(base, smaller, ClientSpec(1)) is None and derive(base, smaller) is None
    got = derive(base, smaller, ClientSpec(4))
    assert got is not None and got.max_concurrency == 4
    want = simulate(smaller, tr, clients=ClientSpec(4), summary_only=True).summary.flat()
    assert not differ(got.flat(), want), differ(got.flat(), want)
    # the parsed rows reused across points hold the trace's times, not a closed loop's sends
    assert all(r.arrival_s == 0.0 for r in fresh_requests(tr, cfg))
    rows = run_points(expand({"gpu_memory_utilization": [0.9, 0.95], "max_concurrency": [1, 4]}, BASE, burst))
    assert sum(bool(r["derived_from"]) for r in rows) == 2
    assert len({r["throughput_rps"] for r in rows}) == 2


def test_summary_json_records_the_clients(burst: Path, tmp_path: Path) -> None:
    tr = load_trace(burst)
    for n in (3, None):
        simulate(make_config(**BASE), tr, clients=ClientSpec(n), summary_only=True).write(tmp_path / str(n))
        doc = json.loads((tmp_path / str(n) / "summary.json").read_text())
        assert doc["max_concurrency"] == n


def kvsim(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception  # no traceback
    return res.exit_code, res.output


FLAGS = ("--cost-model", "constant:0.01", "--no-enable-prefix-caching", "-j", "1")


def test_cli_flag_and_swept_key(burst: Path, tmp_path: Path) -> None:
    code, text = kvsim("sweep", str(burst), "--set", "block_size=16,32", "--max-concurrency", "2",
                       "--api-server-count", "0", "--out", str(tmp_path / "a"), *FLAGS)
    assert code == 0, text
    df = pd.read_parquet(tmp_path / "a" / "sweep.parquet")
    assert df["max_concurrency"].tolist() == [2, 2] and df["block_size"].tolist() == [16, 32]
    grid = tmp_path / "g.yaml"
    grid.write_text("max_concurrency: [1, 2]\napi_server_count: 0\n")
    code, text = kvsim("sweep", str(burst), "--grid", str(grid), "--out", str(tmp_path / "b"), *FLAGS)
    assert code == 0, text
    b = pd.read_parquet(tmp_path / "b" / "sweep.parquet")
    assert b["max_concurrency"].tolist() == [1, 2]
    assert b["throughput_rps"].iloc[1] > b["throughput_rps"].iloc[0]


@pytest.mark.parametrize("args, what", [
    (["--set", "max_concurrency=2,4", "--max-concurrency", "2", "--api-server-count", "0"], "give one"),
    (["--set", "max_concurrency=0,4", "--api-server-count", "0"], "max_concurrency=0"),
    (["--set", "max_concurrency=2.5", "--api-server-count", "0"], "max_concurrency=2.5"),
    (["--set", "max_concurrency=2,4", "--api-server-count", "2"], "--api-server-count 1 or 0"),
])
def test_cli_bad_clients_are_one_line(burst: Path, tmp_path: Path, args: list[str], what: str) -> None:
    code, text = kvsim("sweep", str(burst), *args, "--out", str(tmp_path / "r"), *FLAGS)
    assert code == 2 and len(text.strip().splitlines()) == 1 and what in text, text
    assert not (tmp_path / "r" / "sweep.parquet").exists()


def test_a_swept_session_trace_with_clients_is_refused_up_front(tmp_path: Path) -> None:
    from workloads.sessions import generate_sessions, parse_sessions
    from workloads.writer import write_trace

    spec = parse_sessions({"sessions": 2, "turns": {"kind": "uniform", "low": 2, "high": 2},
                           "new_tokens": {"kind": "uniform", "low": 16, "high": 32},
                           "output": {"kind": "uniform", "low": 4, "high": 8}, "think_time_s": {"mean": 0.5, "cv": 1.0}})
    write_trace(make_trace(generate_sessions(spec, np.random.default_rng(1)).to_dict("records")).df,
                tmp_path / "s.jsonl")
    with pytest.raises(ConfigError, match="session trace"):
        expand({"max_concurrency": [2]}, BASE, tmp_path / "s.jsonl")


def test_run_point_is_closed_loop_too(burst: Path) -> None:
    """The single-point path (``run_point``) sends as its point says, as ``run_points`` does."""
    one, four = (run_point(p) for p in expand({"max_concurrency": [1, 4]}, BASE, burst))
    assert one["status"] == four["status"] == "ok" and four["throughput_rps"] > 2.5 * one["throughput_rps"]
