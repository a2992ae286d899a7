"""The small things a new user trips over (issue 20, low items): progress off a terminal,
counters that stay within their total, empty or misspelt YAML configs, `plot -h`, an all-infeasible
plan's figure, the latency tail against the SLO, negative headroom and the knobs column."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
from rich.console import Console
from typer.testing import CliRunner

from sim.cli.main import _load, app
from sim.cli.progress import Stages
from sim.cluster.slo import Slo, SloTarget
from sim.fleet.plots import latency_figure
from sim.fleet.report import NEGATIVE_HEADROOM, notes_section
from tests.helpers import BUNDLED

_load()
runner = CliRunner()


def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def test_progress_off_a_terminal_is_plain_lines_that_never_overshoot() -> None:
    buf = io.StringIO()
    st = Stages(Console(file=buf, force_terminal=False, width=200), "candidates", every_s=3600)
    st.update("capacity", 0, 6)
    st.update("capacity", 3, 6)    # within every_s: quiet
    st.update("capacity", 9, 6)    # more than announced: the total grows, no "9/6"
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("capacity: 0/6 candidates") and len(lines) == 2
    assert lines[1].startswith("capacity: 9/9 candidates (100%)") and "9/6" not in buf.getvalue()


def test_simulate_prints_progress_lines_when_output_is_not_a_terminal(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    pd.DataFrame({"arrival_s": [0.05 * i for i in range(2500)], "prompt_tokens": 100,
                  "output_tokens": 20}).to_csv(trace, index=False)
    code, text = kvsim("simulate", str(trace), "--out", str(tmp_path / "r"), "--cost-model", "constant:0.001")
    assert code == 0, text
    assert "simulating: " in text and "/2,500 requests" in text


def test_an_empty_yaml_config_is_refused_and_a_typo_gets_a_suggestion(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    code, text = kvsim("simulate", "--config", str(empty), "--out", str(tmp_path / "r"))
    assert code == 2 and "the config is empty" in text
    typo = tmp_path / "typo.yaml"
    typo.write_text("gpu_memory_utilisation: 0.9\n")
    code, text = kvsim("budget", "--config", str(typo))
    assert code == 2 and "did you mean 'gpu_memory_utilization'?" in text


def test_plot_help_gives_whole_short_descriptions() -> None:
    code, text = kvsim("plot", "-h")
    assert code == 0
    line = next(raw for raw in text.splitlines() if raw.strip().startswith("breakdown"))
    assert "Stacked bars" in line and not line.rstrip().endswith("Fig.")


def test_an_all_infeasible_plan_draws_the_best_achievable_latency_against_the_slo(tmp_path: Path) -> None:
    out = tmp_path / "p"
    code, text = kvsim("plan", str(BUNDLED), "--gpu", "h100", "--tp", "1", "--slo-ttft-p90", "0.005", "--seeds", "1",
                       "--window", "300", "--search-iters", "0", "--workers", "1", "--no-band", "--out", str(out))
    assert code == 0, text
    md = (out / "plan.md").read_text()
    assert "No candidate meets the SLO at any load" in md
    assert (out / "best_achievable.png").is_file() and not (out / "pareto.png").exists()
    assert "![Best achievable latency vs the SLO](best_achievable.png)" in md


def test_the_latency_figure_has_a_tail_view_in_ms_with_the_slo() -> None:
    rng = np.random.default_rng(0)
    slo = Slo((SloTarget("ttft", 0.99, 0.5), SloTarget("tpot", 0.99, 0.05)))
    fig = latency_figure(rng.exponential(0.1, 2000), rng.exponential(0.01, 2000), slo, "2 x h100")
    assert len(fig.axes) == 4
    tail = fig.axes[2]
    assert tail.get_yscale() == "log" and tail.get_xlabel() == "TTFT (ms)"
    assert any(len(line.get_xdata()) == 2 and np.allclose(line.get_xdata(), 500.0) for line in tail.get_lines())  # SLO
    labels = tail.get_legend_handles_labels()[1]
    assert any(lab.startswith("p99 here: ") and lab.endswith(" ms") for lab in labels)


def test_negative_headroom_is_explained_and_the_console_table_has_knobs() -> None:
    table = pd.DataFrame([{"gpu": "h100", "tp": 1, "note": "", "binding_constraint": "decode-compute",
                           "headroom_pct": -12.0}])
    assert NEGATIVE_HEADROOM in notes_section(table)
    from sim.cli.plan import rich_table

    row = {"gpu": "h100", "tp": 1, "knobs": "max_num_seqs=64", "note": "", "replicas": 2, "gpus": 2,
           "slo_pass": True, "validated": True, "attainment_lower": 0.995, "max_qps_per_replica": 3.0,
           "qps_ci_low": 2.5, "qps_ci_high": 3.5, "headroom_pct": -12.0, "cost_per_hour": 5.9,
           "price_unverified": False, "cost_per_1m_out_tokens": 0.2, "cost_per_day": 141.6, "kv_util": 0.4,
           "preempt_per_1k": 0.0, "binding_constraint": "decode-compute"}
    plan = SimpleNamespace(demand=SimpleNamespace(peak_qps=6.7, mean_qps=5.0, clients=0),
                           spec=SimpleNamespace(slo=Slo((SloTarget("ttft", 0.99, 1.0),))), table=pd.DataFrame([row]))
    console = Console(width=250, record=True)
    console.print(rich_table(plan))  # type: ignore[arg-type]
    text = console.export_text()
    assert "knobs" in text and "max_num_seqs=64" in text and "-12%*" in text


def test_plot_cdf_has_a_tail_view_and_draws_the_slo() -> None:
    from sim.plots.common import RunInfo
    from sim.plots.heatmap import parse_slo
    from sim.plots.latency import latency_cdfs

    rng = np.random.default_rng(1)
    req = pd.DataFrame({"status": "finished", "ttft_s": rng.exponential(0.2, 3000),
                        "tpot_s": rng.exponential(0.02, 3000), "e2e_s": rng.exponential(5.0, 3000)})
    fig = latency_cdfs([(RunInfo("t", "m", "h100", "c", "run"), req)], slo=parse_slo(["ttft_p99_s<=0.5"]), tail=True)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and "tail" in ax.get_title()
    assert any(len(line.get_xdata()) == 2 and np.allclose(line.get_xdata(), 0.5) for line in ax.get_lines())
    assert any(np.allclose(line.get_ydata(), 0.01) for line in ax.get_lines() if len(line.get_ydata()) == 2)
    assert "SLO p99 <= 500 ms" in ax.get_legend_handles_labels()[1]
