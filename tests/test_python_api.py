"""The Python API beside ``simulate`` (kvsim/api.py): sweep, plan, simulate_cluster,
fleet_prefix_bounds, and ``make_config(vllm_args=...)`` -- the same typed results the CLI writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kvsim
from sim.cli.simulate import bundled_trace
from sim.cluster.whatif import fleet_prefix_bounds
from sim.errors import ConfigError
from sim.fleet.table import COLUMNS
from tests.helpers import mooncake_slice

LINE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2 --max-num-seqs 64 --port 8000"


@pytest.fixture
def head(tmp_path: Path) -> Path:
    """The bundled trace's first 120 requests, as a file (sweep points name their trace by path)."""
    p = tmp_path / "head.csv"
    p.write_text("\n".join(bundled_trace().read_text().splitlines()[:121]) + "\n")
    return p


def test_make_config_takes_a_pasted_line_under_the_keywords() -> None:
    cfg = kvsim.make_config(vllm_args=LINE, gpu="h200")
    assert (cfg.model, cfg.tensor_parallel_size, cfg.max_num_seqs, cfg.gpu) == (
        "meta-llama/Llama-3.1-8B-Instruct", 2, 64, "h200")
    assert kvsim.make_config(vllm_args=LINE, max_num_seqs=32).max_num_seqs == 32   # a keyword wins, as a flag does
    with pytest.raises(ConfigError, match="vllm serve: no model"):
        kvsim.make_config(vllm_args="vllm serve --max-num-seqs 8")
    with pytest.raises(ConfigError, match="vllm serve: no model"):
        kvsim.simulate_cluster({"instances": [{"name": "r"}]}, None, vllm_args="vllm serve --max-num-seqs 8")
    with pytest.raises(ConfigError, match="not modelled"):
        kvsim.make_config(vllm_args="vllm serve m -pp 2")


def test_an_unknown_key_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as e:
        kvsim.make_config(max_num_seq=5)
    msg = str(e.value)
    assert "did you mean 'max_num_seqs'" in msg and "valid: " in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="did you mean 'block_size'"):
        kvsim.simulate_cluster({"instances": [{"name": "r"}]}, None, blok_size=16)


def test_sweep_returns_the_table_the_cli_writes(head: Path, tmp_path: Path) -> None:
    run = kvsim.sweep({"max_num_seqs": [2, 64]}, head, tmp_path / "sw", model="llama-3.1-8b",
                      cost_model="constant:0.01", max_model_len=8192)
    assert (run.planned, run.ran, run.failed) == (2, 2, 0)
    assert (tmp_path / "sw" / "sweep.parquet").exists()
    t = run.table.set_index("max_num_seqs")
    one = kvsim.simulate(kvsim.make_config(model="llama-3.1-8b", cost_model="constant:0.01", max_model_len=8192,
                                           max_num_seqs=2), kvsim.load_trace(head))
    assert t.loc[2, "ttft_p99_s"] == pytest.approx(one.summary.ttft_s.p99)
    assert t.loc[2, "ttft_p99_s"] > t.loc[64, "ttft_p99_s"]              # the cap queues requests
    again = kvsim.sweep({"max_num_seqs": [2, 64]}, head, tmp_path / "sw", model="llama-3.1-8b",
                        cost_model="constant:0.01", max_model_len=8192)
    assert (again.ran, again.skipped) == (0, 2)                          # resumed like the CLI


def test_plan_returns_the_plan_table_with_the_lines_knobs(head: Path) -> None:
    plan = kvsim.plan(head, slo={"ttft_p90": 2.0, "tpot_p90": 0.2}, seeds=1, window=120, search_iters=1,
                      validate=False, band=False, cost_model="roofline",
                      vllm_args="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 48")
    t = plan.table
    assert set(COLUMNS) <= set(t.columns) and len(t) == 1
    r = t.iloc[0]
    assert r["knobs"] == "max_num_seqs=48" and r["tp"] == 1 and r["max_qps_per_replica"] > 0
    assert plan.spec.base["max_num_seqs"] == 48 and plan.spec.base["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    with pytest.raises(ConfigError, match="unknown target 'ttft_p95'"):
        kvsim.plan(head, slo={"ttft_p95": 1.0})


def test_simulate_cluster_applies_the_keys_to_every_instance(head: Path) -> None:
    res = kvsim.simulate_cluster({"instances": [{"name": "r", "count": 2}], "router": "round-robin"}, head,
                                 model="llama-3.1-8b", cost_model="constant:0.01", max_num_seqs=3)
    assert len(res.names) == 2
    req = res.requests
    assert (req["status"] == "finished").all() and set(req["instance"]) == {0, 1}
    assert int(res.steps["num_running"].max()) == 3                    # max_num_seqs reached every instance
    wide = kvsim.simulate_cluster({"instances": [{"name": "r", "count": 2, "config": {"max_num_seqs": 64}}],
                                   "router": "round-robin"}, head, model="llama-3.1-8b",
                                  cost_model="constant:0.01", max_num_seqs=3)
    assert int(wide.steps["num_running"].max()) > 3                     # the file's instance config wins


def test_fleet_prefix_bounds_is_exported_and_ordered() -> None:
    tr = mooncake_slice(300)                       # prompts that share prefixes (hash ids)
    b = kvsim.fleet_prefix_bounds(tr, 4, 20_000)
    hits = [x.hit_tokens for x in (b.floor, b.per_replica, b.shared, b.unbounded)]
    assert hits == sorted(hits) and hits[0] == 0 and hits[-1] > 0
    assert b == fleet_prefix_bounds(tr, 4, 20_000)
    assert kvsim.fleet_prefix_bounds is fleet_prefix_bounds and {"sweep", "plan", "simulate_cluster"} <= set(
        kvsim.__all__)
    assert np.isfinite(b.per_replica.hit_rate)
