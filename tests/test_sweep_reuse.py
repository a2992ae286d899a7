"""A sweep worker parses its trace once; reused parsing and cached parts give identical rows."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim.run.static as static
import sim.sweep.reuse as reuse
from sim.config import make_config
from sim.io.ingest import make_requests
from sim.request import FIELDS
from sim.sweep import PROVENANCE_COLUMNS, TIMING_COLUMNS, expand, run_point, run_sweep
from workloads import load_trace

ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "workloads" / "data" / "azure_conv_slice.csv"
SMALL = {"kv_memory": "2GiB", "max_num_seqs": 64, "max_model_len": 8192}


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("trace") / "slice.csv"
    p.write_text("".join(SLICE.read_text().splitlines(keepends=True)[:201]))
    return p


def _fields(r: object) -> tuple[object, ...]:
    return tuple(getattr(r, f) for f in FIELDS)


@pytest.mark.parametrize("kw", [{}, {"enable_prefix_caching": False}, {"preset": "paper-v0"}])
def test_fresh_requests_equal_parsed_ones_and_are_new_objects(trace_path: Path, kw: dict[str, object]) -> None:
    tr, cfg = load_trace(trace_path), make_config(**kw)
    reuse._ROWS.clear()
    first, again, parsed = reuse.fresh_requests(tr, cfg), reuse.fresh_requests(tr, cfg), make_requests(tr, cfg)
    assert [_fields(r) for r in again] == [_fields(r) for r in parsed] == [_fields(r) for r in first]
    assert not {id(r) for r in first} & {id(r) for r in again}


def _rows(points: list, cold: bool) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for p in points:
        if cold:
            reuse._ROWS.clear()
            static.clear()
        row = run_point(p)
        out.append({k: v for k, v in row.items() if k not in (*TIMING_COLUMNS, *PROVENANCE_COLUMNS)})
    return out


def test_reuse_gives_identical_sweep_rows(trace_path: Path) -> None:
    grid = {"gpu_memory_utilization": [0.5, 0.9], "block_size": [16, 32], "enable_prefix_caching": [True, False]}
    points = expand(grid, SMALL, trace_path)
    cold, warm = _rows(points, cold=True), _rows(points, cold=False)
    assert all(r["status"] == "ok" for r in cold)
    assert warm == cold
    assert len({r["mem_free"] for r in cold}) > 1   # the points really differ


def test_sweep_on_one_worker_matches_cold_points(trace_path: Path, tmp_path: Path) -> None:
    points = expand({"block_size": [8, 16, 32]}, SMALL, trace_path)
    table = run_sweep(points, tmp_path / "sw", jobs=1).table
    cold = _rows(points, cold=True)
    for (_, got), want in zip(table.iterrows(), cold, strict=True):
        for k, v in want.items():
            assert got[k] == v or (v != v and got[k] != got[k]), k


def test_cached_cost_model_is_shared_by_points_that_differ_in_knobs() -> None:
    static.clear()
    a = static.static_parts(make_config(block_size=16, gpu_memory_utilization=0.8))
    b = static.static_parts(make_config(block_size=32, gpu_memory_utilization=0.9))
    assert a[2] is b[2] and a[1] != b[1]
    c = static.static_parts(make_config(block_size=16, gpu_memory_utilization=0.8, step_time_scale=1.5))
    assert c[2] is not a[2] and c[1] == a[1]


@pytest.mark.parametrize("kw", [{"rate_scale": 4.0}, {"total_rate": 9.0}, {"arrival_jitter": False},
                                {"seed": 5}])
def test_reused_parsing_follows_the_arrival_knobs(kw: dict[str, object]) -> None:
    """A point that changes only an arrival knob gets its own arrivals, never the first point's
    (the coarse Mooncake slice, so the jitter and its seed matter too)."""
    tr = load_trace(ROOT / "workloads" / "data" / "mooncake_conv_slice.jsonl")
    reuse._ROWS.clear()
    base = make_config()
    reuse.fresh_requests(tr, base)
    cfg = make_config(**kw)
    got = [r.arrival_s for r in reuse.fresh_requests(tr, cfg)]
    assert got == [r.arrival_s for r in make_requests(tr, cfg)]
    assert got != [r.arrival_s for r in make_requests(tr, base)]
