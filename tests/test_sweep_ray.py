"""The Ray backend for real: a local Ray, and a head node on loopback reached by address.

Loopback and privacy settings come first, before Ray is imported (distributed-sweeps.md s3):
Ray otherwise binds the primary IP and reports usage stats. The head node is our own child in
its own process group and is stopped by signalling that group -- never ``ray stop``.
"""

from __future__ import annotations

import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from sim.sweep import PROVENANCE_COLUMNS, TIMING_COLUMNS, expand, run_sweep

pytestmark = pytest.mark.ray
if os.environ.get("REQUIRE_RAY") != "1":
    pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "workloads" / "data" / "azure_conv_slice.csv"
GRID = {"block_size": [8, 16], "allocator": ["paged", "slab"], "max_num_seqs": [8, 64]}
BASE = {"cost_model": "constant:0.01"}


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("trace") / "small.csv"
    p.write_text("".join(SLICE.read_text().splitlines(keepends=True)[:101]))
    return p


@pytest.fixture(scope="module")
def local_table(small_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    pts = expand(GRID, BASE, small_trace)
    return run_sweep(pts, tmp_path_factory.mktemp("local"), jobs=1).table


def _comparable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=[*TIMING_COLUMNS, *PROVENANCE_COLUMNS], errors="ignore").sort_values("key").reset_index(drop=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_head() -> Iterator[tuple[str, dict[str, str]]]:
    """``ray start --head`` on 127.0.0.1 in its own process group; yields (address, env)."""
    ray_bin = Path(sys.executable).with_name("ray")
    if not ray_bin.exists():
        pytest.skip("the ray CLI is not installed next to this interpreter")
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # AF_UNIX paths must stay < 107 bytes
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    log = Path(tmp) / "head.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
             "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats",
             f"--temp-dir={tmp}"], stdout=fh, stderr=subprocess.STDOUT, env=env, process_group=0)
    try:
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray head did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", env
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def test_local_ray_matches_process_pool(small_trace: Path, tmp_path: Path, local_table: pd.DataFrame) -> None:
    pts = expand(GRID, BASE, small_trace)
    pool = run_sweep(pts, tmp_path / "pool", jobs=2).table
    ray_run = run_sweep(pts, tmp_path / "ray", backend="ray", jobs=2)
    assert ray_run.ran == len(pts) == 6 and ray_run.failed == 0
    pd.testing.assert_frame_equal(_comparable(pool), _comparable(local_table))
    pd.testing.assert_frame_equal(_comparable(ray_run.table), _comparable(local_table))


def test_ray_retries_a_dead_worker(small_trace: Path, tmp_path: Path, local_table: pd.DataFrame) -> None:
    from sim.sweep.worker import run_points

    marker = tmp_path / "died-once"

    def dies_once(task, trace):  # type: ignore[no-untyped-def]
        hit = any(p.columns.get("max_num_seqs") == 8 and p.columns.get("block_size") == 16 for p in task)
        if hit and not marker.exists():
            marker.touch()
            os._exit(1)
        return run_points(task, trace)

    pts = expand(GRID, BASE, small_trace)
    run = run_sweep(pts, tmp_path / "ray", backend="ray", jobs=2, ray_fn=dies_once)
    assert marker.exists(), "the worker never died"
    assert run.failed == 0
    pd.testing.assert_frame_equal(_comparable(run.table), _comparable(local_table))


def test_cli_against_head_node_by_address(ray_head: tuple[str, dict[str, str]], small_trace: Path,
                                          tmp_path: Path, local_table: pd.DataFrame) -> None:
    address, env = ray_head
    cmd = [sys.executable, "-m", "sim.cli.main", "sweep", str(small_trace), "--out", str(tmp_path / "o"),
           "--backend", "ray", "--address", address, "--cost-model", "constant:0.01",
           "--set", "block_size=8,16", "--set", "allocator=paged,slab", "--set", "max_num_seqs=8,64"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    df = pd.read_parquet(tmp_path / "o" / "sweep.parquet")
    pd.testing.assert_frame_equal(_comparable(df), _comparable(local_table))


def test_ray_derives_pool_knob_points_as_the_process_pool_does(small_trace: Path, tmp_path: Path) -> None:
    """Ray tasks are whole classes of points too (sim/sweep/driver.py): the points that differ
    only in pool knobs are derived from one simulated base, and equal the local rows."""
    grid = {"gpu_memory_utilization": [0.5, 0.8, 0.95], "block_size": [16, 32]}
    pts = expand(grid, {"model": "llama-3.1-8b", "gpu": "h100"}, small_trace)
    pool = run_sweep(pts, tmp_path / "pool", jobs=2).table
    ray_run = run_sweep(pts, tmp_path / "ray", backend="ray", jobs=2)
    derived = (ray_run.table["derived_from"] != "").sum()
    assert derived >= 2, ray_run.table[["key", "derived_from"]]   # 2 of 3 per block size
    assert derived == (pool["derived_from"] != "").sum()
    pd.testing.assert_frame_equal(_comparable(ray_run.table), _comparable(pool))
