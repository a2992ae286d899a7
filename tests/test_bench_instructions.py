"""bench/bench_instructions.py: the replay's instructions are callgrind's count of a full run
less that of a run stopped before the replay; both runs set up and warm the same slice."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sim.cli.simulate import bundled_trace
from tests.conftest import REPO
from tests.helpers import bench_module

SCRIPT = REPO / "bench" / "bench_instructions.py"


def inner(*args: str) -> dict[str, int]:
    p = subprocess.run([sys.executable, str(SCRIPT), "--trace", str(bundled_trace()), *args],
                       capture_output=True, text=True, check=True, cwd=REPO)
    line = next(x for x in p.stdout.splitlines() if x.startswith("INNER "))
    return json.loads(line.removeprefix("INNER "))


def test_the_count_is_the_last_collected_line_of_callgrinds_report() -> None:
    bi = bench_module("bench_instructions")
    err = "==12== Callgrind, a call-graph generating cache profiler\n==12== Events    : Ir\n==12== Collected : 5139\n"
    assert bi.collected(err) == 5139
    with pytest.raises(RuntimeError, match="no instruction count"):
        bi.collected("==12== the program crashed\n")


def test_the_setup_run_stops_before_the_replay_and_the_full_run_replays_the_slice() -> None:
    setup = inner("--what", "engine", "--limit", "120", "--inner", "setup")
    full = inner("--what", "engine", "--limit", "120", "--inner", "full")
    assert setup["requests"] == full["requests"] == 120
    assert setup["steps"] == 0 < full["steps"]
    assert "calibrated" in full["cost_model"]


def test_without_valgrind_the_bench_says_it_is_skipped(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    bi = bench_module("bench_instructions")
    monkeypatch.setattr(bi.shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "argv", ["bench_instructions.py", "--trace", str(bundled_trace())])
    bi.main()
    assert "skipped (valgrind not found)" in capsys.readouterr().out


@pytest.mark.parametrize("args, says", [
    (["--trace", "no/such.csv"], "--trace no/such.csv: no such file"),
    (["--limit", "0"], "--limit >= 1"),
    (["--hours", "-1"], "--hours must be > 0"),
])
def test_bad_flags_are_one_line_errors(args: list[str], says: str) -> None:
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO)
    assert p.returncode != 0 and says in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
