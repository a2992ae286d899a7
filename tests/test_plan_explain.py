"""Plans that explain themselves (sim/fleet/explain.py, report.py, plots.py): infeasible at any
load, TP refused up front, real window size, cost model per candidate, ranking caveat, plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim.cli.simulate import bundled_trace
from sim.fleet.explain import INFEASIBLE, ranking_caveat, tp_refusal
from sim.fleet.plots import pareto_figure, replicas_figure

runner = CliRunner()
cli_main._load()


def plan(*args: str) -> tuple[int, str]:
    res = runner.invoke(cli_main.app, ["plan", str(bundled_trace()), *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def test_a_plan_nobody_can_pass_says_infeasible_at_any_load(tmp_path: Path) -> None:
    """A 5 ms p90 TTFT is below one prefill of the bundled prompts on any GPU: every candidate
    fails even at the lowest probed load, and the plan says so with the latency it saw there."""
    out = tmp_path / "p"
    code, text = plan("--gpu", "h100,l40s", "--tp", "1", "--slo-ttft-p90", "0.005", "--seeds", "2",
                      "--window", "600", "--search-iters", "1", "--workers", "1", "--out", str(out))
    assert code == 0, text
    t = pd.read_csv(out / "plan.csv")
    assert t["note"].str.startswith(INFEASIBLE).all() and (t["replicas"] == 0).all()
    assert t["note"].str.contains(r"TTFT p90 (?:>= )?\d", regex=True).all()            # the latency it saw
    assert t["note"].str.contains("would help: more TP").all()                  # and what would help
    assert (t["binding_constraint"] == "prefill-compute").all()
    md = (out / "plan.md").read_text()
    assert "**No candidate meets the SLO at any load**" in md
    assert md.count("| infeasible |") == 2
    assert "`prefill-compute`: TTFT misses because the prompts themselves take too long" in md
    # the bundled trace has 500 requests: the window is the whole trace, and the plan says so
    assert "window of 500 requests (the whole trace: --window 600 is longer)" in md
    assert t["cost_model"].str.contains("h100").sum() == 1 and t["cost_model"].str.contains("l40s").sum() == 1
    assert "| cost model |" in md
    assert "infeasible" in text


def test_a_tp_that_does_not_divide_the_kv_heads_is_refused_up_front() -> None:
    assert tp_refusal("llama-3.1-8b", 3) == "--tp 3: must divide or be a multiple of Llama-3.1-8B's 8 KV heads"
    assert tp_refusal("llama-3.1-8b", 2) == "" and tp_refusal("llama-3.1-8b", 16) == ""
    code, text = plan("--tp", "1,3", "--slo-ttft-p99", "1")
    assert code == 2 and "--tp 3: must divide" in text and "\n" not in text.strip()


def row(gpu: str, tp: int, cost: float, basis: str, passed: bool = True, edge: float = np.nan) -> dict[str, object]:
    return {"gpu": gpu, "tp": tp, "slo_pass": passed, "cost_per_hour": cost, "cost_basis": basis,
            "cost_per_hour_pessimistic": edge}


def test_a_caveat_when_spec_sheet_numbers_decide_the_order() -> None:
    soft = pd.DataFrame([row("h100", 1, 10.0, "uncalibrated"), row("l40s", 1, 12.0, "fitted")])
    text = ranking_caveat(soft)
    assert "#1 (h100 TP1) is 20% cheaper than #2 (l40s TP1)" in text and "h100 TP1: an analytic roofline" in text
    assert "no error band is known" in text
    assert ranking_caveat(pd.DataFrame([row("h100", 1, 10.0, "fitted"), row("l40s", 1, 12.0, "fitted")])) == ""
    same_shape = pd.DataFrame([row("h100", 1, 10.0, "uncalibrated"), row("h100", 1, 12.0, "uncalibrated")])
    assert ranking_caveat(same_shape) == ""          # knobs on one GPU x TP: no spec-sheet comparison
    one_passes = pd.DataFrame([row("h100", 1, 10.0, "uncalibrated"), row("l40s", 1, 12.0, "extrapolated", False)])
    assert ranking_caveat(one_passes) == ""


def test_the_error_band_tells_whether_the_order_holds() -> None:
    holds = pd.DataFrame([row("h100", 1, 10.0, "extrapolated", edge=11.0), row("l40s", 2, 12.0, "extrapolated")])
    assert ranking_caveat(holds) == ""               # #1 at its pessimistic edge still costs less
    flips = pd.DataFrame([row("h100", 1, 10.0, "extrapolated", edge=13.0),
                          row("l40s", 2, 12.0, "extrapolated", edge=12.5)])
    text = ranking_caveat(flips)
    assert "the order reverses there" in text
    unknown = pd.DataFrame([row("h100", 1, 10.0, "extrapolated", edge=13.0), row("l40s", 2, 12.0, "extrapolated")])
    assert "cannot be told" in ranking_caveat(unknown)
    assert "l40s TP2: measurements of another GPU or TP scaled by spec-sheet ratios" in text


def test_replicas_over_time_has_whole_number_ticks_and_the_pareto_legend_sits_beside_the_lines() -> None:
    t = np.arange(0, 600, 60.0)
    sched = pd.DataFrame({"t_s": t, "billed": [1, 2, 2, 3, 3, 2, 1, 1, 2, 2], "serving": [1, 1, 2, 2, 3, 3, 2, 1, 1, 2],
                          "oracle": [1, 2, 2, 3, 2, 2, 1, 1, 2, 2], "rate": np.linspace(1, 3, 10)})
    fig = replicas_figure(sched, 3, "3 x h100 tp1")
    ax = fig.axes[0]
    fig.canvas.draw()
    ticks = [v for v in ax.get_yticks() if ax.get_ylim()[0] <= v <= ax.get_ylim()[1]]
    assert ticks and all(float(v).is_integer() for v in ticks)
    table = pd.DataFrame([{"gpu": "h100", "tp": 1, "knobs": "defaults", "replicas": 3, "max_qps_per_replica": 10.0,
                           "cost_per_hour": 9.0, "slo_pass": True},
                          {"gpu": "l40s", "tp": 1, "knobs": "defaults", "replicas": 8, "max_qps_per_replica": 4.0,
                           "cost_per_hour": 11.0, "slo_pass": True}])
    fig = pareto_figure(table, 28.0)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, plot = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= plot.x1 - 1                  # entirely to the right of the plotting area
