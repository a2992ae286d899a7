"""bench/bench_compiled.py: compiled vs pure Python, in fresh processes side by side, the same steps."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sim.cli.simulate import bundled_trace
from tests.conftest import REPO
from tests.helpers import bench_module

SCRIPT = REPO / "bench" / "bench_compiled.py"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO, env=env)


def test_both_sides_run_the_same_steps_and_the_ratio_is_printed() -> None:
    if len(bench_module("record").compiled_loops()) < 5:
        pytest.skip("the compiled loops were not built (no C compiler at install) or KVSIM_PURE_PYTHON is set")
    p = run("--trace", str(bundled_trace()), "--limit", "80", "--rounds", "2")
    assert p.returncode == 0, p.stderr
    assert "pure Python / compiled = " in p.stdout and "MISMATCH" not in p.stdout
    assert '"bench": "bench_compiled"' in p.stdout


def test_it_skips_or_refuses_in_one_line() -> None:
    p = run("--trace", str(REPO / "no-such-trace.csv"))
    assert p.returncode == 0 and p.stdout.startswith("bench_compiled: skipped (no trace")
    p = run("--trace", str(bundled_trace()), "--rounds", "0")
    assert p.returncode != 0 and p.stderr.strip() == "bench_compiled: --rounds must be >= 1"
    p = run("--trace", str(bundled_trace()), "--limit", "-3")
    assert p.returncode != 0 and p.stderr.strip() == "bench_compiled: --limit must be >= 0 (0: every request)"
    p = run("--trace", str(bundled_trace()), "--what", "nonsense")
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith("bench_compiled: --what is 'engine' or a router; --router 'nonsense'")
    p = run("--trace", str(bundled_trace()), env={**os.environ, "KVSIM_PURE_PYTHON": "1"})
    assert p.returncode == 0 and "skipped (compiled loops in use: none" in p.stdout
