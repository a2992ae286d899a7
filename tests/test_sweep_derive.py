"""Sweep points derived from a simulated base equal the points simulated (sim/sweep/derive.py)."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pytest

from sim.config import make_config
from sim.io.ingest import make_requests
from sim.kv.block_pool import BlockPool
from sim.kv.margin import Margin
from sim.sweep import PROVENANCE_COLUMNS, TIMING_COLUMNS, expand, run_point, run_sweep
from sim.sweep.derive import derive, record_ops, replay_evictions, run_base
from sim.sweep.worker import run_points
from tests.helpers import BUNDLED
from workloads import load_trace

SKIP = (*TIMING_COLUMNS, *PROVENANCE_COLUMNS)


@pytest.fixture(scope="module")
def trace() -> Any:
    return load_trace(BUNDLED)


def _same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Keys whose values differ (NaN equals NaN), timings and provenance aside."""
    return [k for k in a if k not in SKIP and not k.startswith("timings")
            and not (a[k] == b.get(k) or (a[k] != a[k] and b.get(k) != b.get(k)))]


def test_margin_allows_exactly_the_shifts_that_keep_every_outcome() -> None:
    m = Margin()
    for slack in (5, 3, -2, 9, -7):
        m.note(slack)
    assert (m.pass_min, m.fail_max) == (3, -2)
    for d in range(-6, 7):  # d less of the resource: every slack moves by -d
        same = all((s >= 0) == (s - d >= 0) for s in (5, 3, -2, 9, -7))
        assert m.allows(d) == same, d


def test_replay_counts_the_evictions_a_smaller_pool_makes() -> None:
    """One logical run of pops, registrations and frees on pools of 3 sizes: the replay of the
    largest pool's log gives each pool's own eviction count."""
    rng = np.random.default_rng(7)
    script, sizes = [], []  # (pop n | free table i with its first k blocks hashed); <= 40 blocks held
    for _ in range(400):
        n = int(rng.integers(1, 6))
        if sizes and (sum(sizes) + n > 40 or rng.random() < 0.45):
            i = int(rng.integers(0, len(sizes)))
            script.append(("free", i, int(rng.integers(0, 9))))
            sizes.pop(i)
        else:
            script.append(("pop", n, 0))
            sizes.append(n)
    counts = {}
    for n in (400, 120, 41):
        pool, ops, shared = BlockPool(n), array("q"), [False]
        record_ops(pool, ops, shared)
        tables: list[list[int]] = []
        key = 1
        for op, a, k in script:
            if op == "pop":
                if sum(map(len, tables)) + a > n - 1:
                    pytest.fail("script does not fit the smallest pool")
                tables.append(pool.get_new_blocks(a))
            else:
                t = tables.pop(a)
                for b in t[: min(k, len(t))]:  # its first k blocks filled: registered
                    pool.cache_block(b, key)
                    key += 1
                pool.release(t)
        counts[n] = (pool.evictions, ops)
        pool.check()
    log = counts[400][1]
    assert counts[41][0] > counts[120][0] > 0     # the pools really differ
    for n, (ev, _) in counts.items():
        assert replay_evictions(log, n - 1) == ev, n


@pytest.mark.parametrize("kw", [dict(model="llama-3.1-8b", gpu="h100"),
                                dict(model="llama-3.1-8b", gpu="h100", async_scheduling=False, block_size=32),
                                dict(model="llama-3.1-8b", gpu="h100", max_num_batched_tokens=2048)])
def test_derived_summaries_equal_simulated_ones(trace: Any, kw: dict[str, Any]) -> None:
    base_cfg = make_config(gpu_memory_utilization=0.95, max_num_seqs=512, **kw)
    _, base = run_base(base_cfg, trace, make_requests(trace, base_cfg))
    assert base is not None
    derived = 0
    for mem, seqs in [(0.95, 512), (0.5, 64), (0.7, 256), (0.9, 32), (0.6, 16)]:
        cfg = make_config(gpu_memory_utilization=mem, max_num_seqs=seqs, **kw)
        got = derive(base, cfg)
        if got is None:
            continue
        derived += 1
        want = run_point_summary(cfg, trace)
        assert not _same(got.flat(), want), _same(got.flat(), want)
    assert derived >= 4


def run_point_summary(cfg: Any, trace: Any) -> dict[str, Any]:
    from sim.run.simulate import simulate

    return simulate(cfg, trace, summary_only=True).summary.flat()


def test_a_binding_cap_derives_only_where_its_margin_allows(trace: Any) -> None:
    """max_num_seqs 4 holds requests back: a larger cap is another run, a larger pool is not."""
    cfg = make_config(model="llama-3.1-8b", gpu="h100", gpu_memory_utilization=0.9, max_num_seqs=4)
    _, base = run_base(cfg, trace, make_requests(trace, cfg))
    assert base is not None and base.seq_margin[0] > -(1 << 60)   # the cap refused admissions
    wider = make_config(model="llama-3.1-8b", gpu="h100", gpu_memory_utilization=0.9, max_num_seqs=8)
    assert derive(base, wider) is None
    assert run_point_summary(wider, trace)["ttft_p50_s"] != run_point_summary(cfg, trace)["ttft_p50_s"]
    smaller = make_config(model="llama-3.1-8b", gpu="h100", gpu_memory_utilization=0.6, max_num_seqs=4)
    got = derive(base, smaller)
    assert got is not None and not _same(got.flat(), run_point_summary(smaller, trace))


def test_a_preempting_run_is_no_base(trace: Any) -> None:
    cfg = make_config(model="llama-2-70b", gpu="a100-80gb", tensor_parallel_size=2)
    summary, base = run_base(cfg, trace, make_requests(trace, cfg))
    assert summary.preemptions > 0 and base is None


def test_a_sweep_derives_rows_equal_to_simulated_rows(trace: Any, tmp_path: Any) -> None:
    grid = {"gpu_memory_utilization": [0.5, 0.8, 0.95], "max_num_seqs": [4, 64, 256], "block_size": [16, 32]}
    points = expand(grid, {"model": "llama-3.1-8b", "gpu": "h100"}, BUNDLED)
    rows = run_points(points)
    assert [r["key"] for r in rows] == [p.key for p in points]
    assert sum(bool(r["derived_from"]) for r in rows) >= 8     # most of the grid is one run per block size
    for p, r in zip(points, rows, strict=True):
        assert r["status"] == "ok"
        assert not _same(r, run_point(p)), (p.columns, _same(r, run_point(p)))
    table = run_sweep(points, tmp_path / "sw", jobs=1).table
    assert (table["derived_from"] != "").sum() == sum(bool(r["derived_from"]) for r in rows)
