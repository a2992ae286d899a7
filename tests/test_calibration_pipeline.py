"""End to end on CPU: harness (--allow-cpu, interpreter) -> fit -> `--cost-model calibrated`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # must precede the first triton import
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from calibration import run_gpu  # noqa: E402
from calibration.fit import write_fit  # noqa: E402
from sim.cost import StepBatch, basis_of, build_cost_model  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from sim.model.catalog import resolve_gpu, resolve_model  # noqa: E402

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cpu_calibration")
    assert run_gpu.main(["--allow-cpu", "--out", str(out)]) == 0
    return out


def test_harness_writes_labelled_cpu_data(cpu_run: Path) -> None:
    meta = json.loads((cpu_run / "meta.json").read_text())
    assert meta["gpu"] == "cpu" and "NOT GPU DATA" in meta["timing"]
    for suite in ("attention", "gemm", "kv_write", "copy"):
        assert (cpu_run / f"{suite}.csv").exists(), suite
    rows = (cpu_run / "attention.csv").read_text().splitlines()
    assert "paged" in rows[0] and any(",False," in r for r in rows[1:])  # both variants


def test_harness_resumes(cpu_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (cpu_run / "attention.csv").read_text()
    assert run_gpu.main(["--allow-cpu", "--out", str(cpu_run), "--suites", "attention"]) == 0
    assert "0 points measured" in capsys.readouterr().out
    assert (cpu_run / "attention.csv").read_text() == before


def test_harness_refuses_cpu_without_flag(tmp_path: Path) -> None:
    assert run_gpu.main(["--out", str(tmp_path)]) == 2
    assert run_gpu.main(["--allow-cpu"]) == 2  # CPU runs must name a dir outside calibration/data


def test_budget_stops_early(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_gpu.main(["--allow-cpu", "--out", str(tmp_path), "--budget-s", "0",
                         "--suites", "copy"]) == 0
    assert "budget" in capsys.readouterr().out


def test_fit_then_simulate_with_it(cpu_run: Path) -> None:
    path, doc = write_fit(cpu_run)
    assert path == cpu_run / "fit.yaml" and doc["source"] == "cpu"
    att = doc["attention"]["paged"]
    assert att["n_heldout"] > 0 and att["heldout"] == "random mixed batches"
    assert all(v >= 0 for v in att["coef"].values())
    model, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("h200")
    cost = build_cost_model("calibrated", model, gpu, 1, path)
    assert "cpu test run" in basis_of(cost).detail and basis_of(cost).basis == "extrapolated"
    times = [cost.step_time(StepBatch(num_decode_seqs=8, decode_context_tokens=c,
                                      pages_touched=-(-c // 16))) for c in (800, 8000, 80000)]
    assert all(t > 0 for t in times)
    assert times[0] < times[1] < times[2]
    assert build_cost_model("calibrated", model, gpu, 1, cpu_run).name == cost.name  # dir form


def test_missing_calibration_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        build_cost_model("calibrated", resolve_model("llama-3.1-8b"), resolve_gpu("h200"), 1,
                         tmp_path / "nope.yaml")
