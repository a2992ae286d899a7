"""`calibrate check` / `fit --from` on `vllm bench serve --max-concurrency N` results (closed loop).

The results are simulated by kvsim itself with its own closed loop of N clients under a known
stack (tests/helpers.py: vllm_bench_closed_loop, behind its API server) and written in vLLM's save-result
shape with ``max_concurrency`` and each request's lengths; the replay sees only the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calibration.replay import FEATURES, replay
from calibration.serving_runs import read_many
from sim.cli.calibrate import app
from sim.errors import ConfigError
from tests.helpers import CPU_S, PER_SEQ_S, known_stack, vllm_bench_closed_loop

ROW = re.compile(r"^(\S.*?\)) +([\d.]+)s +([\d.]+)s +([+-][\d.]+)%", re.M)
SLOTS = (4, 16)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("closed")
    files: dict[str, Path] = {"truth": known_stack(d / "truth.yaml")}
    for i, n in enumerate(SLOTS):
        files[f"c{n}"] = d / f"c{n}.json"
        files[f"c{n}"].write_text(json.dumps(vllm_bench_closed_loop(files["truth"], 60, n, seed=21 + i)))
    return files


def _rows(text: str) -> dict[str, tuple[float, float]]:
    """stage -> (measured, simulated mean E2E) of a `calibrate check` table."""
    return {m[1]: (float(m[2]), float(m[3])) for m in ROW.finditer(text)}


def test_calibrate_check_replays_a_closed_loop_under_its_own_stack(runs: dict[str, Path]) -> None:
    res = CliRunner().invoke(app, ["check", str(runs["c4"]), str(runs["c16"]), "--serving-stack", str(runs["truth"])])
    assert res.exit_code == 0, res.output
    rows = _rows(res.output)
    assert len(rows) == 2, res.output
    for n in SLOTS:
        (meas, sim), = (v for k, v in rows.items() if k.startswith(f"c{n} "))
        assert abs(sim / meas - 1) < 0.02
    assert "(closed loop 4)" in res.output and "(closed loop 16)" in res.output


def test_the_closed_loop_is_what_reproduces_the_run(runs: dict[str, Path], tmp_path: Path) -> None:
    """The same requests sent open loop (all at once) queue far longer: the cap is replayed, not ignored."""
    doc = json.loads(runs["c4"].read_text())
    (tmp_path / "open.json").write_text(json.dumps(doc | {"max_concurrency": None}))
    closed, open_ = (replay(read_many([p])[0], str(runs["truth"]), window_s=None)
                     for p in (runs["c4"], tmp_path / "open.json"))
    assert closed.n == open_.n == 60 and closed.unfinished == 0
    assert closed.e2e_mean == pytest.approx(doc["mean_e2el_ms"] / 1e3, rel=0.02)
    assert open_.e2e_mean > 1.5 * closed.e2e_mean


def test_the_gradients_count_the_steps_from_each_send(runs: dict[str, Path], tmp_path: Path) -> None:
    """d mean E2E (TTFT) / d cpu_s and per_seq_s, schedule held, equal the replays' finite
    differences: a request's steps run from its send (a slot freed), not from the file's time 0.
    Without the API server each send is at a step's end, so holding the schedule is exact (an
    ingress ends mid-step: the step it lands in then moves with the stack, a first-order effect
    the fit's damped steps absorb)."""
    st = read_many([runs["c16"]])[0]
    base = replay(st, str(runs["truth"]), window_s=None, api_server_count=0)
    for k, kw, step in ((FEATURES.index("step"), {"cpu_x": 2.5}, 0.5 * CPU_S),
                        (FEATURES.index("seq"), {"per_seq_x": 4.0}, 1.0 * PER_SEQ_S)):
        moved = replay(st, str(known_stack(tmp_path / f"{k}.yaml", **kw)), window_s=None, api_server_count=0)
        assert base.grad_e2e[k] > 0
        assert (moved.e2e_mean - base.e2e_mean) / step == pytest.approx(base.grad_e2e[k], rel=1e-3)
        assert (moved.ttft_mean - base.ttft_mean) / step == pytest.approx(base.grad_ttft[k], rel=1e-3)


def test_fit_from_fits_closed_loop_runs(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "mine.yaml"
    fit = CliRunner().invoke(app, ["fit", "--from", str(runs["c4"]), str(runs["c16"]), "--out", str(out)])
    assert fit.exit_code == 0, fit.output
    assert "fitting 2 stage(s) at once" in fit.output
    fitted = _rows(fit.output.split("in sample")[1])
    assert len(fitted) == 2
    for meas, sim in fitted.values():
        assert abs(sim / meas - 1) < 0.10


@pytest.mark.parametrize("cap", [-3, 2.5, "eight", True])
def test_a_bad_max_concurrency_is_one_line(runs: dict[str, Path], tmp_path: Path, cap: object) -> None:
    (tmp_path / "bad.json").write_text(json.dumps(json.loads(runs["c4"].read_text()) | {"max_concurrency": cap}))
    with pytest.raises(ConfigError, match=r"bad\.json: max_concurrency .*whole number >= 1"):
        read_many([tmp_path / "bad.json"])
