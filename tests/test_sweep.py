"""kvsim sweep: grid expansion, collapse, keys, failures, crash-safe resume."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from sim.errors import ConfigError
from sim.sweep import SweepStore, expand, parse_sets, run_point, run_sweep

ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "workloads" / "data" / "azure_conv_slice.csv"
FAST = {"cost_model": "constant:0.01"}


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 120 requests of the bundled slice (a sweep point takes ~0.1 s)."""
    p = tmp_path_factory.mktemp("trace") / "small.csv"
    p.write_text("".join(SLICE.read_text().splitlines(keepends=True)[:121]))
    return p


def test_parse_sets_types_values() -> None:
    g = parse_sets(["block_size=8,16", "gpu-memory-utilization=0.85, 0.9",
                    "enable_prefix_caching=true,false", "allocator=paged", "block_size=32"])
    assert g == {"block_size": [8, 16, 32], "gpu_memory_utilization": [0.85, 0.9],
                 "enable_prefix_caching": [True, False], "allocator": ["paged"]}


@pytest.mark.parametrize("bad", ["nope=1,2", "block_size", "block_size="])
def test_parse_sets_rejects(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_sets([bad])


def test_invalid_value_fails_before_running(small_trace: Path) -> None:
    with pytest.raises(ConfigError, match="block_size"):
        expand({"block_size": [16, 0]}, FAST, small_trace)


def test_nonsensical_combinations_collapse(small_trace: Path) -> None:
    grid = {"allocator": ["paged", "slab"], "block_size": [8, 16, 32], "reservation": ["max", "pow2"]}
    pts = expand(grid, FAST, small_trace)
    # paged: 3 block sizes (reservation is meaningless); slab: 2 reservations (block_size is)
    assert len(pts) == 5
    slab = [p for p in pts if p.columns["allocator"] == "slab"]
    paged = [p for p in pts if p.columns["allocator"] == "paged"]
    assert sorted(p.columns["reservation"] for p in slab) == ["max", "pow2"]
    assert all(p.columns["block_size"] is None for p in slab)
    assert sorted(p.columns["block_size"] for p in paged) == [8, 16, 32]
    assert all(p.columns["reservation"] is None for p in paged)


def test_key_covers_config_and_trace_content(small_trace: Path, tmp_path: Path) -> None:
    a = expand({"block_size": [16]}, FAST, small_trace)[0]
    again = expand({"block_size": [16]}, FAST, small_trace)[0]
    other_cfg = expand({"block_size": [16]}, {**FAST, "seed": 1}, small_trace)[0]
    copy = tmp_path / "copy.csv"
    copy.write_text(small_trace.read_text())
    same_content = expand({"block_size": [16]}, FAST, copy)[0]
    lines = small_trace.read_text().splitlines(keepends=True)
    lines[5] = lines[5].replace(lines[5].split(",")[1], "999", 1)
    changed = tmp_path / "changed.csv"
    changed.write_text("".join(lines))
    assert a.key == again.key == same_content.key
    assert other_cfg.key != a.key
    assert expand({"block_size": [16]}, FAST, changed)[0].key != a.key


def test_failed_point_recorded_others_continue(small_trace: Path, tmp_path: Path) -> None:
    pts = expand({"model": ["llama-3.1-8b", "no-such-model"]}, FAST, small_trace)
    run = run_sweep(pts, tmp_path / "sw")
    df = run.table
    assert run.failed == 1 and len(df) == 2
    bad = df[df["model"] == "no-such-model"].iloc[0]
    assert bad["status"] == "failed" and "no-such-model" in bad["error"]
    good = df[df["model"] == "llama-3.1-8b"].iloc[0]
    assert good["status"] == "ok" and good["num_finished"] == 120 and good["throughput_rps"] > 0
    # a rerun skips both (failed points only rerun with retry_failed)
    assert run_sweep(pts, tmp_path / "sw").ran == 0
    assert run_sweep(pts, tmp_path / "sw", retry_failed=True).ran == 1


def test_row_has_key_columns_and_flat_metrics(small_trace: Path) -> None:
    p = expand({"block_size": [32], "gpu_memory_utilization": [0.9]}, FAST, small_trace)[0]
    row = run_point(p)
    assert row["block_size"] == 32 and row["gpu_memory_utilization"] == 0.9
    for col in ("ttft_p99_s", "tpot_p99_s", "throughput_rps", "mem_token_state", "mem_free",
                "preemptions_per_1k", "prefix_hit_rate", "cost_model_name"):
        assert col in row, col
    shares = sum(row[f"mem_{c}"] for c in ("token_state", "reserved", "internal_frag", "external_frag", "free"))
    assert shares == pytest.approx(1.0)


def test_compaction_after_crash_keeps_one_row_per_key(small_trace: Path, tmp_path: Path) -> None:
    """A kill between writing sweep.parquet and deleting parts leaves duplicates on disk."""
    pts = expand({"block_size": [8, 16]}, FAST, small_trace)
    store = SweepStore(tmp_path)
    rows = [run_point(p) for p in pts]
    for r in rows:
        store.append(r)
    store.compact()
    store.append(rows[0])  # the same key again, as if its part had survived
    assert set(store.done()) == {p.key for p in pts}
    df = store.compact()
    assert len(df) == 2 and df["key"].is_unique
    assert not list((tmp_path / "parts").iterdir())


def _recorded(out: Path) -> list[str]:
    keys: list[str] = []
    if (out / "sweep.parquet").exists():
        keys += pd.read_parquet(out / "sweep.parquet", columns=["key"])["key"].tolist()
    for f in (out / "parts").glob("*.parquet") if (out / "parts").exists() else []:
        with contextlib.suppress(OSError):  # renamed into place but gone by compaction meanwhile
            keys += pd.read_parquet(f, columns=["key"])["key"].tolist()
    return keys


def test_resume_after_hard_kill(small_trace: Path, tmp_path: Path) -> None:
    """SIGKILL the sweep (driver and workers) mid-run; the rerun computes only what is missing."""
    out = tmp_path / "sw"
    cmd = [sys.executable, "-m", "sim.cli.main", "sweep", str(small_trace), "--out", str(out),
           "--cost-model", "constant:0.01", "-j", "2",
           "--set", "max_num_seqs=4,8,16,32,64,128", "--set", "block_size=8,16,32",
           "--set", "max_num_batched_tokens=512,1024,2048,4096,8192,16384"]
    n = 6 * 3 * 6  # points: enough that rows buffered up to a second apart leave some unwritten
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            process_group=0)
    deadline = time.monotonic() + 120
    try:
        while len(_recorded(out)) < 3:
            assert proc.poll() is None, "sweep ended before it could be killed"
            assert time.monotonic() < deadline, "no point finished in time"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = _recorded(out)
    assert 3 <= len(before) < n, "kill must land mid-run"
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stderr.split())
    assert f"ran {n - len(set(before))}, skipped {len(set(before))} already done" in flat
    df = pd.read_parquet(out / "sweep.parquet")
    assert len(df) == n and df["key"].is_unique
    assert (df["status"] == "ok").all()
    assert sorted(zip(df["max_num_seqs"], df["block_size"], df["max_num_batched_tokens"], strict=True)) == sorted(
        (s, b, t) for s in (4, 8, 16, 32, 64, 128) for b in (8, 16, 32) for t in (512, 1024, 2048, 4096, 8192, 16384))
    assert not list((out / "parts").glob("*.parquet"))


def test_cli_grid_yaml_and_columns(small_trace: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("allocator: [paged, slab]\nblock_size: [16, 32]\ncost_model: constant:0.01\n")
    from typer.testing import CliRunner

    from sim.cli.main import _load, app
    _load()
    res = CliRunner().invoke(app, ["sweep", str(small_trace), "--grid", str(grid), "--out",
                                   str(tmp_path / "o"), "-j", "1"])
    assert res.exit_code == 0, res.output
    df = pd.read_parquet(tmp_path / "o" / "sweep.parquet")
    assert len(df) == 3  # paged x {16, 32} + slab
    assert {"allocator", "block_size", "cost_model", "trace", "ttft_p99_s", "mem_token_state"} <= set(df.columns)
    assert df["block_size"].isna().sum() == 1
