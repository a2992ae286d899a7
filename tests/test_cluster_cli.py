"""`kvsim simulate --cluster FILE.yaml`: the outputs gain the cluster columns; bad cluster
files are one ``error:`` line (sim/cli/cluster.py, sim/cluster/spec.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import sim.cli.main as cli_main

cli_main._load()
runner = CliRunner()

PD = {"router": "kv-aware", "flow": "decode-first", "threshold": 64,
      "defaults": {"model": "llama-3.1-8b", "max_model_len": 8192, "cost_model": "roofline"},
      "instances": [{"name": "prefill", "role": "prefill", "count": 2, "config": {"gpu": "h100"}},
                    {"name": "decode", "role": "decode", "config": {"gpu": "h200", "tensor_parallel_size": 2}}],
      "links": {"default": {"kind": "rdma-ndr"}, "pairs": [{"between": ["prefill0", "decode"], "kind": "nvlink4"}]}}


def write(tmp: Path, data: object) -> str:
    p = tmp / "cluster.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_simulate_cluster_writes_the_cluster_columns(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = runner.invoke(cli_main.app, ["simulate", "--cluster", write(tmp_path, PD), "--out", str(out)])
    assert res.exit_code == 0, res.output
    req = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")
    assert {"instance", "prefill_instance", "transfer_s", "kv_wait_s"} <= set(req.columns)
    assert set(steps["instance"]) == {0, 1, 2}
    assert (req["status"] == "finished").all()
    remote = req["prefill_instance"] >= 0
    assert remote.any() and (~remote).any()          # the threshold kept short prompts local
    assert (req.loc[remote, "kv_wait_s"] >= req.loc[remote, "transfer_s"]).all()
    assert req.loc[~remote, "transfer_s"].isna().all()
    summary = json.loads((out / "cluster.json").read_text())
    assert [i["role"] for i in summary["instances"]] == ["prefill", "prefill", "decode"]
    assert {link["kind"] for link in summary["links"]} <= {"nvlink4", "rdma-ndr"}
    assert (out / "ttft_breakdown.png").stat().st_size > 0 and (out / "link_utilisation.png").exists()


@pytest.mark.parametrize("patch, needle", [
    (lambda c: c["instances"][1].update(role="decoder"), "unknown role 'decoder'"),
    (lambda c: c["links"]["pairs"][0].update(between=["prefill0", "decode9"]), "link to nowhere"),
    (lambda c: c["instances"][1]["config"].update(num_gpu_blocks=40), "decode instance decode"),
    (lambda c: c.update(routr="kv-aware"), "unknown key 'routr'"),
])
def test_bad_cluster_files_are_one_error_line(tmp_path: Path, patch, needle: str) -> None:  # type: ignore[no-untyped-def]
    c = json.loads(json.dumps(PD))
    patch(c)
    res = runner.invoke(cli_main.app, ["simulate", "--cluster", write(tmp_path, c), "--out", str(tmp_path / "o")])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("error: ") and needle in lines[0], res.output


def test_a_unified_cluster_summary_sets_its_hit_rate_between_the_fleet_bounds(tmp_path: Path) -> None:
    """The summary places the run's prefix hit rate among what the trace allows (issue 50 item 7):
    per-replica LRUs and one shared LRU (not ordered in general: partitions keep each replica's
    own recent blocks) at most the unbounded reuse, and so the routed run; a P/D cluster
    (prefill and decode hits differ in kind) gets none."""
    import pandas as pd

    src = Path(__file__).resolve().parents[1] / "workloads" / "data" / "mooncake_conv_slice.jsonl"
    head = tmp_path / "mc.jsonl"
    head.write_text("".join(src.read_text().splitlines(keepends=True)[:200]))
    uni = {"router": "kv-aware", "defaults": {"cost_model": "roofline", "max_model_len": 131072},
           "instances": [{"name": "r", "role": "unified", "count": 3}]}
    out = tmp_path / "uni"
    res = runner.invoke(cli_main.app, ["simulate", "--cluster", write(tmp_path, uni), str(head), "--out", str(out)])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "cluster.json").read_text())
    b = s["prefix_bounds"]
    assert 0 < b["per_replica"] <= b["unbounded"] < 1 and 0 < b["shared"] <= b["unbounded"]
    assert 0 < s["prefix_hit_rate"] <= b["unbounded"]
    assert "the trace allows" in " ".join(res.output.split())
    for m in ("ttft", "tpot", "e2e"):  # the single-replica summary's latency rows
        assert 0 < s[f"{m}_p50_s"] <= s[f"{m}_p90_s"] <= s[f"{m}_p99_s"]
    assert "E2E p50/p90/p99" in res.output and "out tok/s" in res.output
    [basis] = s["cost_basis"]  # one cost model times the three replicas; its basis is the run's verdict
    assert basis["instances"] == "r0, r1, r2" and basis["basis"] in ("fitted", "extrapolated", "uncalibrated")
    assert len(pd.read_parquet(out / "requests.parquet")) == 200
    pd_out = tmp_path / "pd"
    big = PD | {"defaults": PD["defaults"] | {"max_model_len": 131072}}
    res = runner.invoke(cli_main.app, ["simulate", "--cluster", write(tmp_path, big), str(head), "--out", str(pd_out)])
    assert res.exit_code == 0, res.output
    s = json.loads((pd_out / "cluster.json").read_text())
    assert s["prefix_bounds"] is None
    # a pulled prompt's KV is a transfer, not a prefix hit: the rate is the prefilling side's
    assert 0 < s["prefix_hit_rate"] <= b["unbounded"]
    assert all(i["hit_rate"] is not None for i in s["instances"] if i["role"] == "prefill")


HEADLINE = ("requests finished / rejected", "simulated time", "throughput", "load (offered vs served)",
            "TTFT p50/p90/p99", "TPOT p50/p90/p99", "E2E p50/p90/p99")


def headline(text: str) -> dict[str, str]:
    """The headline rows of a printed summary table: metric -> value."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 2 and cells[0] in HEADLINE:
            rows[cells[0]] = cells[1]
    return rows


def test_one_instance_cluster_prints_the_single_replicas_headline(tmp_path: Path) -> None:
    """Item 4 of issue 50: one summary for one replica or many. A one-instance cluster runs the
    same requests at the same times as ``simulate``, so its table opens with the same rows."""
    flags = ["--cost-model", "constant:0.02", "--api-server-count", "0", "--rate-scale", "4"]
    wide = {"COLUMNS": "250"}  # (one line a row)
    one = runner.invoke(cli_main.app, ["simulate", "--out", str(tmp_path / "a"), *flags], env=wide)
    fleet = runner.invoke(cli_main.app, ["simulate", "--cluster", write(tmp_path, {"instances": [{"name": "r"}]}),
                                         "--out", str(tmp_path / "b"), *flags], env=wide)
    assert one.exit_code == 0 and fleet.exit_code == 0, (one.output, fleet.output)
    a, b = headline(one.output), headline(fleet.output)
    assert set(a) == set(HEADLINE) and a == b, (a, b)


def test_a_cluster_that_rejects_every_request_still_ends(tmp_path: Path) -> None:
    """No step at all: the run's end is the clock's, and the summary says every request was refused."""
    cfg = {"defaults": {"model": "llama-3.1-8b", "cost_model": "constant:0.01", "max_model_len": 256,
                        "api_server_count": 0}, "instances": [{"name": "r", "count": 2}]}
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,1000,4\n0.5,900,4\n")
    out = tmp_path / "out"
    res = runner.invoke(cli_main.app, ["simulate", str(trace), "--cluster", write(tmp_path, cfg), "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "cluster.json").read_text())
    assert summary["rejected"] == 2 and summary["finished"] == 0 and summary["simulated_s"] == 0
