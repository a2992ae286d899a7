"""Issue 50: `simulate --cluster` takes the command line as every instance's defaults (flags, a
pasted `vllm serve` line, the arrival options) or refuses it in one line; "keeps up" only when
requests do not wait (sim/io/overload.py); the small items of point 12 (sim/config)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim.config.schema import make_config
from sim.config.vllm_args import parse_vllm_serve
from sim.errors import ConfigError
from sim.io.overload import offered_load
from sim.model.catalog import resolve_model
from sim.run.simulate import simulate
from tests.conftest import make_trace

cli_main._load()
runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "workloads" / "data" / "azure_conv_slice.csv"
FLEET: dict[str, Any] = {"router": "least-outstanding-tokens",
         "instances": [{"name": "r", "count": 2}, {"name": "wide", "config": {"max_num_seqs": 64}}]}


def files(tmp: Path, cluster: dict[str, Any] = FLEET, rows: int = 24) -> tuple[str, str]:
    c, t = tmp / "cluster.yaml", tmp / "t.csv"
    c.write_text(yaml.safe_dump(cluster))
    t.write_text("".join(SLICE.read_text().splitlines(keepends=True)[:rows + 1]))
    return str(c), str(t)


def run(tmp: Path, *args: str, cluster: dict[str, Any] = FLEET, out: str = "o") -> tuple[dict[str, Any], pd.DataFrame, str]:
    c, t = files(tmp, cluster)
    res = runner.invoke(cli_main.app, ["simulate", "--cluster", c, t, "--out", str(tmp / out), *args])
    assert res.exit_code == 0, res.output
    return (json.loads((tmp / out / "cluster.json").read_text()), pd.read_parquet(tmp / out / "requests.parquet"),
            res.output)


@pytest.mark.parametrize("line", [["--model", "llama-3.1-70b", "--tp", "4"],
                                  ["--", "vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "-tp", "4"]])
def test_model_and_tp_on_the_command_line_build_every_instance(tmp_path: Path, line: list[str]) -> None:
    doc, _, out = run(tmp_path, "--max-num-seqs", "32", *line)
    assert [(resolve_model(i["model"]).key, i["tensor_parallel_size"]) for i in doc["instances"]] == \
        [("llama-3.1-70b", 4)] * 3
    assert [i["overrides"] for i in doc["instances"]] == [{}, {}, {"max_num_seqs": {"value": 64, "replaced": 32}}]
    assert "wide: max_num_seqs=64 (was 32)" in out


def test_the_command_line_wins_over_the_files_defaults_and_the_instance_over_both(tmp_path: Path) -> None:
    c = {**FLEET, "defaults": {"model": "llama-3.1-70b", "tensor_parallel_size": 4}}
    doc, _, _ = run(tmp_path, "--tp", "8", cluster=c)
    assert {(i["model"], i["tensor_parallel_size"]) for i in doc["instances"]} == {("llama-3.1-70b", 8)}


def test_rate_scale_shrinks_the_clusters_arrival_span(tmp_path: Path) -> None:
    _, one, _ = run(tmp_path, out="x1")
    _, three, _ = run(tmp_path, "--rate-scale", "3", out="x3")
    span = [float(r["arrival_s"].max() - r["arrival_s"].min()) for r in (one, three)]
    assert span[0] > 0 and span[1] == pytest.approx(span[0] / 3, rel=1e-9)
    _, total, _ = run(tmp_path, "--total-rate", "100", out="t")
    assert len(total) / float(total["arrival_s"].max() - total["arrival_s"].min()) == pytest.approx(100)  # n / span


def test_request_rate_replaces_the_clusters_arrivals(tmp_path: Path) -> None:
    _, req, _ = run(tmp_path, "--request-rate", "inf")
    assert (req["arrival_s"] == 0).all()


@pytest.mark.parametrize("args, needle", [
    (["--check"], "--check is not modelled for a cluster run"),
    (["--stream"], "--stream is not modelled"),
    (["--summary-only"], "--summary-only is not modelled"),
])
def test_a_flag_that_cannot_apply_is_refused_in_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    c, t = files(tmp_path)
    res = runner.invoke(cli_main.app, ["simulate", "--cluster", c, t, "--out", str(tmp_path / "o"), *args])
    assert res.exit_code != 0 and needle in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_an_instance_cannot_set_the_clusters_arrivals(tmp_path: Path) -> None:
    c: dict[str, Any] = {"instances": [{"name": "r", "count": 2, "config": {"rate_scale": 2}}]}
    cf, t = files(tmp_path, c)
    res = runner.invoke(cli_main.app, ["simulate", "--cluster", cf, t, "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "instances[0].config.rate_scale: arrivals are the cluster's" in res.output


def test_cluster_help_prints_every_key_with_its_default() -> None:
    res = runner.invoke(cli_main.app, ["simulate", "--cluster-help"])
    assert res.exit_code == 0
    for needle in ("router", "default: least-outstanding-tokens", "threshold", "count", "default: rdma-ndr",
                   "kv-aware[:prefix=3,queue=2,kv=2,load=0", "prefix-affinity[:tokens=2048,queue=4]"):
        assert needle in res.output


# ---- overload during bursts -------------------------------------------------------------------
def bursts(n_bursts: int = 4, size: int = 40, gap: float = 60.0) -> list[dict[str, float]]:
    return [{"arrival_s": b * gap, "prompt_tokens": 64, "output_tokens": 100}
            for b in range(n_bursts) for _ in range(size)]


def test_a_bursty_trace_served_at_its_rate_is_overloaded_during_bursts() -> None:
    """Bursts of 40 requests every minute, four slots of 1 s requests: each burst drains in ~10 s,
    so finishes keep the offered rate, but most requests wait seconds for their first step."""
    cfg: dict[str, Any] = dict(cost_model="constant:0.01", num_gpu_blocks=400, max_model_len=256, max_num_seqs=4,
               arrival_jitter=False)
    res = simulate(make_config(**cfg), make_trace(bursts()))
    load = res.summary.load
    assert not load.overloaded and load.overloaded_in_bursts
    assert load.queue_peak >= 30 and load.wait_p90_s > 3.0
    assert load.line().startswith("overloaded during bursts") and "queue peak" in load.line()
    calm = simulate(make_config(**cfg), make_trace(bursts(size=4)))
    assert not calm.summary.load.flagged and calm.summary.load.line().startswith("keeps up")


def test_queue_peak_counts_requests_arrived_and_not_started() -> None:
    arr = np.array([0.0, 0.0, 0.0, 5.0, 5.0])
    start = np.array([0.0, 1.0, 2.0, 5.0, np.nan])
    frame = pd.DataFrame({"arrival_s": arr, "first_scheduled_s": start, "finish_s": start + 1,
                          "status": ["finished"] * 5})
    from sim.io.overload import queue_peak

    assert queue_peak(arr, start) == 2        # at t=0 two of three wait; at t=5 one never starts
    assert offered_load(pd.concat([frame] * 3)).offered_rps is not None


def test_every_instance_gets_the_same_verdict(tmp_path: Path) -> None:
    c = {"instances": [{"name": "r", "count": 2}],
         "defaults": {"cost_model": "constant:0.01", "num_gpu_blocks": 400, "max_model_len": 256, "max_num_seqs": 2,
                      "arrival_jitter": False}}
    cf = tmp_path / "c.yaml"
    cf.write_text(yaml.safe_dump(c))
    tr = tmp_path / "b.csv"
    pd.DataFrame(bursts()).assign(request_id=lambda d: range(len(d))).to_csv(tr, index=False)
    res = runner.invoke(cli_main.app, ["simulate", "--cluster", str(cf), str(tr), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "cluster.json").read_text())
    assert doc["load"]["overloaded_in_bursts"] and not doc["load"]["overloaded"]
    assert all(i["load"]["overloaded_in_bursts"] for i in doc["instances"])
    assert "overloaded during bursts" in res.output


# ---- point 12: pasted lines and make_config ---------------------------------------------------
def test_a_vllm_serve_line_without_a_model_is_refused(tmp_path: Path) -> None:
    res = runner.invoke(cli_main.app, ["budget", "--", "vllm", "serve", "--max-num-seqs", "5"])
    assert res.exit_code != 0 and "no model" in res.output
    ok = runner.invoke(cli_main.app, ["budget", "--json", "--model", "llama-3.1-70b", "--", "vllm", "serve", "-tp", "4"])
    assert ok.exit_code == 0 and json.loads(ok.output.splitlines()[-1])["model"] == "llama-3.1-70b"


def test_the_openai_server_run_as_a_python_module_is_a_pasted_line() -> None:
    line = parse_vllm_serve("python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B-Instruct "
                            "-tp 2 --port 8000")
    assert line.config["model"] == "meta-llama/Llama-3.1-8B-Instruct" and line.config["tensor_parallel_size"] == 2
    res = runner.invoke(cli_main.app, ["budget", "--json", "--", "python3", "-m", "vllm.entrypoints.openai.api_server",
                                       "--model", "meta-llama/Llama-3.1-70B-Instruct", "-tp", "4"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.splitlines()[-1])["tensor_parallel_size"] == 4
    with pytest.raises(ConfigError, match="not vLLM's server"):
        parse_vllm_serve("python -m http.server --model x")


def test_make_config_names_the_valid_keys_and_the_nearest_one() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'max_num_seq'; did you mean 'max_num_seqs'\? \(valid: model"):
        make_config(max_num_seq=5)
