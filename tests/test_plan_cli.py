"""``kvsim plan`` as a user runs it: a small end-to-end plan, its bundle, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim.cli.simulate import bundled_trace

runner = CliRunner()
cli_main._load()


def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(cli_main.app, ["plan", *args])  # the app prints user errors as one line
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


SMALL = ("--slo-ttft-p90", "2", "--slo-tpot-p90", "0.2", "--seeds", "2", "--window", "300",
         "--search-iters", "1", "--workers", "1", "--rate-scale", "4")


@pytest.mark.slow
def test_plan_writes_a_ranked_rerunnable_bundle(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    prices = tmp_path / "prices.yaml"
    prices.write_text("l40s: 0.5\n")
    code, text = kvsim(str(bundled_trace()), "--gpu", "h100,l40s", "--tp", "1", "--prices", str(prices),
                       "--n-plus-k", "1", *SMALL, "--out", str(out))
    assert code == 0, text
    t = pd.read_csv(out / "plan.csv")
    assert {"gpu", "tp", "replicas", "slo_pass", "cost_per_hour", "binding_constraint"} <= set(t.columns)
    assert len(t) == 2 and bool(t.iloc[0]["slo_pass"])
    passing = t[t["slo_pass"]]
    assert t.iloc[0]["cost_per_hour"] == passing["cost_per_hour"].min()     # recommended row first
    assert (t["replicas"] >= 2).all()                                          # N+1
    l40s = t[t["gpu"] == "l40s"].iloc[0]
    assert l40s["price_per_gpu_hour"] == 0.5 and not l40s["price_unverified"]
    for f in ("plan.md", "inputs.yaml", "rerun.sh", "pareto.png", "replicas_over_time.png",
              "latency_cdf.png", "capacity_probes.csv", "validation.csv", "autoscale.csv"):
        assert (out / f).is_file(), f
    inputs = yaml.safe_load((out / "inputs.yaml").read_text())
    assert inputs["seeds"]["replications"] == 2 and inputs["versions"]["kvsim"]
    assert len(inputs["trace"]["sha256"]) == 64
    assert "kvsim plan" in (out / "rerun.sh").read_text()
    assert "Recommended" in (out / "plan.md").read_text()


@pytest.mark.parametrize("args, msg", [
    (("--gpu", "h100"), "no SLO given"),
    (("--slo-ttft-p99", "1", "--gpu", "tpu"), "--gpu 'tpu': not in the catalog"),
    (("--slo-ttft-p99", "1", "--tp", "1,x"), "--tp '1,x': 'x' is not a valid int"),
    (("--slo-ttft-p99", "1", "--rate-scale", "2", "--target-qps", "5"), "exclusive"),
    (("--slo-ttft-p99", "1", "--backend", "dask"), "--backend 'dask'"),
    (("--slo-ttft-p99", "1", "--router", "random"), "--router 'random'"),
    (("--slo-ttft-p99", "-1"), "must be > 0 seconds"),
    (("--slo-ttft-p99", "1", "--attainment", "1.5"), "--attainment 1.5"),
    (("--slo-ttft-p99", "1", "--block-size", "16,0"), "block-size"),
    (("--slo-ttft-p99", "1", "--prices", "/nonexistent.yaml"), "cannot read YAML"),
])
def test_bad_flags_are_one_line_errors(args: tuple[str, ...], msg: str) -> None:
    code, text = kvsim(str(bundled_trace()), *args)
    assert code == 2
    assert msg in text and "\n" not in text.strip()


def test_window_too_small_for_p99_is_refused() -> None:
    code, text = kvsim(str(bundled_trace()), "--slo-ttft-p99", "1", "--window", "200", "--workers", "1")
    assert code == 2 and "--window 200" in text and "use --window >=" in text


def test_a_pasted_lines_knobs_and_tp_show_in_the_rows_and_inputs(tmp_path: Path) -> None:
    """Issue 50 item 12: knobs set in a pasted `vllm serve` line are named in the rows (not
    "defaults"), whole in the table; inputs.yaml names the cost model of the TP planned."""
    head = tmp_path / "head.csv"
    head.write_text("\n".join(bundled_trace().read_text().splitlines()[:121]) + "\n")
    out = tmp_path / "plan"
    code, text = kvsim(str(head), "--slo-ttft-p90", "2", "--slo-tpot-p90", "0.2", "--seeds", "1", "--window", "120",
                       "--search-iters", "1", "--workers", "1", "--no-band", "--no-validate", "--out", str(out),
                       "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "-tp", "2",
                       "--max-num-batched-tokens", "4096")
    assert code == 0, text
    t = pd.read_csv(out / "plan.csv")
    assert list(t["knobs"]) == ["max_num_batched_tokens=4096"] and list(t["tp"]) == [2]
    assert "max_num_batched_tokens=4096" in text
    inputs = yaml.safe_load((out / "inputs.yaml").read_text())
    assert "tp=2" in inputs["cost_model"] and "tp=1" not in inputs["cost_model"]
