"""A user's own clone (issue 20): the Python API and the README's example as written, the trace
schema documented, no path of the team's machines in the repository, a clean install, and the
small honest touches of the CLI (prefix-information note, finish_step documented)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.conftest import make_trace
from tests.helpers import REPO

README = (REPO / "README.md").read_text()


def test_import_kvsim_and_from_sim_give_the_same_api() -> None:
    import kvsim
    import sim

    for name in ("simulate", "make_config", "SimConfig", "SimResult", "load_trace"):
        assert getattr(kvsim, name) is getattr(sim, name)
    assert kvsim.__version__ == sim.__version__
    assert "ConfigError" in (sim.make_config.__doc__ or "") and "max_num_seqs" in (sim.make_config.__doc__ or "")


def test_the_readme_python_example_runs_as_written_without_a_data_folder(tmp_path: Path) -> None:
    block = README.split("### Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert len(block.strip().splitlines()) == 6
    env = {k: v for k, v in os.environ.items() if k != "KVSIM_DATA"} | {"PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", block], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert re.search(r"TTFT p99 \d+\.\d+ s", p.stdout) and "ttft_s" in p.stdout


def test_the_readme_documents_the_normalized_trace_schema() -> None:
    from workloads.schema import COLUMNS

    table = README.split("### Trace schema", 1)[1]
    for col in COLUMNS:
        assert f"`{col}`" in table, col


def test_a_missing_field_error_names_the_schema(tmp_path: Path) -> None:
    from sim.errors import TraceError
    from workloads import load_trace

    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens\n0,5\n")
    with pytest.raises(TraceError) as e:
        load_trace(f, "normalized")
    msg = str(e.value)
    assert "output_tokens" in msg and "arrival_s, prompt_tokens, output_tokens" in msg and "\n" not in msg


TEAM_ROOT = "/" + "work" + "/"  # this team's machines' folder, spelled so that this file does not name it
WORKPLACE = re.compile(re.escape(TEAM_ROOT) + r"|\.\./shared|parents\[\d\] / \"shared\"|parent / \"shared\"")
SCANNED = ("sim", "tests", "bench", "notebooks", "workloads", "calibration", "reports", "kvsim", ".ci", "Makefile",
           "README.md", "pyproject.toml")


def test_no_file_names_a_path_of_the_team_machines() -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *SCANNED],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        path = REPO / name
        if name == "tests/test_clone_and_api.py" or not path.is_file() or path.suffix in (".parquet", ".png"):
            continue
        text = path.read_text(errors="replace")
        hits += [f"{name}: {m.group(0)}" for m in WORKPLACE.finditer(text)]
    assert hits == []


def test_ci_runs_make_test_and_the_optional_data_tests_with_the_data_hidden() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci and "env -u KVSIM_DATA" in ci


def test_pyproject_license_is_an_spdx_string_without_the_setuptools_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    monkeypatch.chdir(REPO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), REPO / "pyproject.toml")
    assert not [w for w in caught if "license" in str(w.message).lower()]
    assert dist.metadata.license_expression == "Apache-2.0"


def test_notebook_02_names_no_workplace_path_and_reads_kvsim_data() -> None:
    nb = (REPO / "notebooks" / "02-capacity-planning.ipynb").read_text()
    assert TEAM_ROOT not in nb and "KVSIM_DATA" in nb


def test_a_trace_without_prefix_information_says_so() -> None:
    from sim import make_config, simulate
    from sim.cli.simulate import has_prefix_info, summary_table
    from tests.helpers import mooncake_slice

    plain = make_trace([{"arrival_s": 0.1 * i, "prompt_tokens": 64, "output_tokens": 4} for i in range(10)])
    assert not has_prefix_info(plain) and has_prefix_info(mooncake_slice(20))
    res = simulate(make_config(cost_model="constant:0.01"), plain)
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(summary_table(res, has_prefix_info(plain)))
    assert "the trace has no prefix information" in console.export_text()


def test_finish_step_is_the_step_that_computed_the_last_token_as_documented() -> None:
    from sim import make_config, simulate

    tr = make_trace([{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 4}])
    for lag in (True, False):
        res = simulate(make_config(async_scheduling=lag, cost_model="constant:0.01", exact_steps=True), tr)
        last = int(res.steps.loc[res.steps["decode_tokens"] > 0, "step"].max())
        assert int(res.requests["finish_step"].iloc[0]) == last
    row = next(line for line in README.splitlines() if line.startswith("| `first_scheduled_step`"))
    assert "computed its last token" in row and "one step later" in row
