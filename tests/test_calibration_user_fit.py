"""Calibrating on your own benchmark (issue 48, point 7): `calibrate fit --from` on `vllm bench serve`
results, and the profile it writes reproduces them under `calibrate check`.

The results are simulated by kvsim itself under a known, physical serving stack (tests/helpers.py:
known_stack: the committed vllm-v1's cpu_s x2 and per_seq_s x3, kernel multipliers 1.1-1.3), at
three request rates, and written in vLLM's save-result shape; the fit starts elsewhere and sees
only the files. Their arrivals are drawn with other seeds than the replay's, so a profile cannot
reproduce them by construction.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from calibration.replay import replay
from calibration.serving_runs import read_many
from calibration.user_fit import NAMES, UserFit
from calibration.user_report import findings
from sim.cli.calibrate import app
from sim.errors import ConfigError
from sim.safe_yaml import safe_load
from tests.helpers import known_stack, vllm_bench_result

RATES = (2.0, 8.0, 20.0)
ROW = re.compile(r"^(\S.*?\)) +([\d.]+)s +([\d.]+)s +([+-][\d.]+)%", re.M)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    d = tmp_path_factory.mktemp("bench")
    truth = known_stack(d / "truth.yaml")
    folder = d / "results"
    folder.mkdir()
    objs = [vllm_bench_result(truth, r, 100, seed=11 + i) for i, r in enumerate(RATES)]
    files = []
    for r, o in zip(RATES, objs, strict=True):
        files.append(folder / f"vllm-{r:g}qps.json")
        files[-1].write_text(json.dumps(o))
    (folder / "server-args.json").write_text(json.dumps({"max_num_seqs": 256}))  # not a result: passed over
    lines = d / "appended.jsonl"  # --append-result: a newline before each object after the first
    lines.write_text("\n".join(json.dumps(o) for o in objs))
    return {"files": files, "folder": [folder], "jsonl": [lines]}


def _rows(text: str) -> dict[str, tuple[float, float]]:
    """stage -> (measured, simulated mean E2E) of a `calibrate check` table."""
    return {m[1]: (float(m[2]), float(m[3])) for m in ROW.finditer(text)}


@pytest.mark.parametrize("given", ["files", "folder", "jsonl"])
def test_a_fit_on_three_rates_reproduces_every_file(runs: dict[str, list[Path]], given: str, tmp_path: Path) -> None:
    out = tmp_path / "my-stack.yaml"
    fit = CliRunner().invoke(app, ["fit", "--from", *map(str, runs[given]), "--out", str(out)])
    assert fit.exit_code == 0, fit.output
    assert "fitting 3 stage(s) at once" in fit.output and "under-determined" not in fit.output
    fitted = _rows(fit.output.split("in sample")[1])
    check = CliRunner().invoke(app, ["check", *map(str, runs[given]), "--serving-stack", str(out)])
    assert check.exit_code == 0, check.output
    checked = _rows(check.output)
    assert len(checked) == 3 and checked == fitted        # the check prints what the fit printed
    for meas, sim in checked.values():
        assert abs(sim / meas - 1) < 0.10                 # the done-when, per file
    entry = next(iter(safe_load(out.read_text())["stacks"].values()))
    assert len(entry["fitted_on"]["refs"]) == 3 and entry["fitted_on"]["models"] == ["llama-3.1-8b"]
    coef, tp1 = entry["coef"], entry["by_tp"][1]
    assert min(coef["eta_tok"], coef["eta_attn"], tp1["eta"]) >= 1.0
    assert min(coef["per_seq_s"], coef["prefill_s"], tp1["cpu_s"]) >= 0.0
    held = [r["e2e_measured_s"] / r["e2e_heldout_s"] - 1 for r in entry["stages"]]
    assert all(math.isfinite(h) for h in held)
    band = entry["band"]
    assert "leave one stage out" in band["basis"]
    assert band["optimistic"] == pytest.approx(min(0.0, min(held)), abs=1e-3)
    assert band["pessimistic"] == pytest.approx(max(0.0, max(held)), abs=1e-3)
    assert "held out" in fit.output and "band (measured / predicted - 1)" in fit.output


def test_one_file_warns_that_the_fit_is_under_determined(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    out = tmp_path / "one.yaml"
    fit = CliRunner().invoke(app, ["fit", "--from", str(runs["files"][1]), "--out", str(out)])
    assert fit.exit_code == 0, fit.output
    assert "warning: one stage: the fit is under-determined" in fit.output and "per_seq_s" in fit.output
    entry = next(iter(safe_load(out.read_text())["stacks"].values()))
    assert "no held-out stage of your own" in entry["band"]["basis"] and "coverage_pct" not in entry["band"]
    assert math.isnan(entry["stages"][0]["e2e_heldout_s"])


def test_the_replay_reads_a_profile_rewritten_in_place(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    """The cause of the old mismatch: a fit rewrote one profile path per iteration and the
    per-process cost cache (keyed by the stack's name) kept timing the first iterate."""
    st = read_many(runs["files"][:1])[0]
    prof = known_stack(tmp_path / "p.yaml")
    a = replay(st, str(prof), window_s=None).e2e_mean
    known_stack(prof, cpu_x=6.0)
    b = replay(st, str(prof), window_s=None).e2e_mean
    assert b > 1.2 * a


def test_the_served_model_is_read_from_the_results_and_disagreement_is_refused(
        runs: dict[str, list[Path]], tmp_path: Path) -> None:
    assert {s.model for s in read_many(runs["files"])} == {"llama-3.1-8b"}     # model_id: a Hugging Face id
    other = json.loads(runs["files"][0].read_text()) | {"model_id": "Qwen/Qwen2.5-7B-Instruct"}
    (tmp_path / "qwen.json").write_text(json.dumps(other))
    with pytest.raises(ConfigError, match=r"names llama-3\.1-8b but .* names qwen2\.5-7b") as e:
        read_many([runs["files"][1], tmp_path / "qwen.json"])
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"is llama-3\.1-8b, but --model qwen2\.5-7b"):
        read_many(runs["files"][:1], model="qwen2.5-7b")
    local = json.loads(runs["files"][0].read_text()) | {"model_id": "/models/my-llama"}
    (tmp_path / "local.json").write_text(json.dumps(local))
    with pytest.raises(ConfigError, match=r"not a model kvsim knows.*give --model"):
        read_many([tmp_path / "local.json"])
    assert read_many([tmp_path / "local.json"], model="llama-3.1-8b")[0].model == "llama-3.1-8b"
    cli = CliRunner().invoke(app, ["fit", "--from", str(runs["files"][1]), str(tmp_path / "qwen.json")])
    assert isinstance(cli.exception, ConfigError)


def test_what_cannot_be_replayed_is_refused(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    ramped = json.loads(runs["files"][0].read_text()) | {"ramp_up_strategy": "linear"}  # (max_concurrency is
    (tmp_path / "ramped.json").write_text(json.dumps(ramped))                     # replayed: closed_loop tests)
    with pytest.raises(ConfigError, match="ramp_up_strategy 'linear'"):
        read_many([tmp_path / "ramped.json"])


def test_a_run_at_an_infinite_rate_is_replayed_as_one_burst(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    burst = json.loads(runs["files"][0].read_text()) | {"request_rate": "inf"}
    (tmp_path / "burst.json").write_text(json.dumps(burst))
    from calibration.replay import stage_trace

    st = read_many([tmp_path / "burst.json"])[0]
    df = stage_trace(st, np.random.default_rng(0)).df
    assert len(df) == 100 and (df["arrival_s"] == 0).all() and not st.overloaded
    assert df["prompt_tokens"].tolist() == burst["input_lens"]        # each request's own lengths


def test_a_term_pushed_past_its_bound_is_a_finding() -> None:
    free = np.array([1.0, 0.62, 1.1, -4e-4, 2e-6, 1e-3])
    fit = UserFit((), free.clip([1, 1, 1, 0, 0, 0]), (), (), 1, free)
    got = findings(fit)
    assert len(got) == 2 and all(f.startswith("finding: ") for f in got)
    assert "eta_tok wants 0.620 < 1.000" in got[0] and "cpu_s wants -0.400 ms" in got[1]
    assert "eta " not in " ".join(got) and len(NAMES) == len(free)


def test_runs_faster_than_the_kernel_basis_give_a_finding_not_an_unphysical_profile(tmp_path: Path) -> None:
    truth = known_stack(tmp_path / "fast.yaml", eta_tok=0.4)   # token-bound kernels 2.5x faster than the basis
    files = []
    for i, r in enumerate((4.0, 16.0)):
        files.append(tmp_path / f"fast-{r:g}.json")
        files[-1].write_text(json.dumps(vllm_bench_result(truth, r, 60, seed=31 + i)))
    out = tmp_path / "fit.yaml"
    fit = CliRunner().invoke(app, ["fit", "--from", *map(str, files), "--out", str(out)])
    assert fit.exit_code == 0, fit.output
    assert re.search(r"^finding: eta_tok wants 0\.\d+ < 1\.000", fit.output, re.M)
    entry = next(iter(safe_load(out.read_text())["stacks"].values()))
    assert entry["coef"]["eta_tok"] == 1.0 and any("eta_tok" in f for f in entry["findings"])
