"""The overload verdict (sim/io/overload.py): offered vs served rate, in summary.json, the summary
table, sweep rows and heatmap cells."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from sim.cli.simulate import summary_table
from sim.config.schema import make_config
from sim.io.overload import Load, offered_load
from sim.plots import sweep_heatmaps
from sim.run.simulate import simulate
from sim.sweep import SweepStore, expand, run_point, run_sweep
from tests.conftest import make_trace

ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "workloads" / "data" / "azure_conv_slice.csv"


def frame(arrivals: list[float], starts: list[float], finishes: list[float], status: list[str] | None = None) -> pd.DataFrame:
    n = len(arrivals)
    return pd.DataFrame({"arrival_s": arrivals, "first_scheduled_s": starts, "finish_s": finishes,
                         "status": status or ["finished"] * n})


def test_a_configuration_that_keeps_up_serves_at_the_offered_rate_whatever_its_latency() -> None:
    """20 requests, one per second, each done 30 s after it arrives: the drain is long, but
    finishes come at the arrival rate."""
    arr = [float(i) for i in range(20)]
    load = offered_load(frame(arr, arr, [a + 30 for a in arr]))
    assert load == Load(offered_rps=1.0, served_rps=1.0, backlog_at_last_arrival=0, overloaded=False)


def test_a_configuration_serving_at_half_the_rate_is_overloaded() -> None:
    """Arrivals at 1/s, service one at a time every 2 s: the queue grows by one every 2 s. At the
    last arrival (t=19) requests 0-9 have started (start = 2 i), so 9 earlier arrivals wait."""
    arr = [float(i) for i in range(20)]
    start = [2.0 * i for i in range(20)]
    load = offered_load(frame(arr, start, [s + 2 for s in start]))
    assert load.offered_rps == 1.0 and load.served_rps == 0.5 and load.overloaded
    assert load.backlog_at_last_arrival == 9
    assert load.line().startswith("OVERLOADED: 1.00 / 0.500 req/s; queue of 9")


def test_rejected_requests_are_not_offered_load_and_tiny_traces_are_not_judged() -> None:
    arr = [float(i) for i in range(20)]
    status = ["finished" if i % 2 == 0 else "rejected" for i in range(20)]
    fin = [a + 1 if s == "finished" else np.nan for a, s in zip(arr, status, strict=True)]
    load = offered_load(frame(arr, arr, fin, status))
    assert load.offered_rps == load.served_rps == 0.5 and not load.overloaded
    assert offered_load(frame(arr[:9], arr[:9], arr[:9])) == Load()          # fewer than 10
    assert offered_load(frame([0.0] * 20, [0.0] * 20, [1.0] * 20)) == Load()  # one burst
    assert "not judged" in Load().line()


def test_summary_json_and_table_flag_the_issues_slab_run(bundled_trace, tmp_path: Path) -> None:
    """The issue's run (Orca Pow2 on OPT-13B / A100-40GB, 12 GiB) cannot keep up with the
    bundled slice; the default Llama-3.1-8B on H100 can."""
    slab = simulate(make_config(allocator="slab", reservation="pow2", model="opt-13b", gpu="a100-40gb",
                                kv_memory="12GiB", max_model_len=2048), bundled_trace)
    slab.write(tmp_path)
    doc = json.loads((tmp_path / "summary.json").read_text())["load"]
    assert doc["overloaded"] is True and doc["served_rps"] < 0.9 * doc["offered_rps"]
    assert doc["backlog_at_last_arrival"] > 100
    console = Console(width=200, record=True)
    console.print(summary_table(slab))
    assert "OVERLOADED" in console.export_text()
    ok = simulate(make_config(), bundled_trace)
    assert not ok.summary.load.overloaded and ok.summary.flat()["overloaded"] is False
    assert ok.summary.load.served_rps > 0.9 * ok.summary.load.offered_rps


def test_sweep_rows_carry_the_flag_and_heatmaps_hatch_overloaded_cells(tmp_path: Path) -> None:
    """On the first 120 requests, one request slot at 10 ms a step cannot keep up; 64 slots can."""
    p = tmp_path / "t.csv"
    p.write_text("".join(SLICE.read_text().splitlines(keepends=True)[:121]))
    pts = expand({"max_num_seqs": [1, 64], "block_size": [16, 32]}, {"cost_model": "constant:0.01"}, p)
    df = run_sweep(pts, tmp_path / "sw").table
    assert df["overloaded"].dtype == "boolean"
    assert df.set_index("max_num_seqs")["overloaded"].groupby(level=0).all().to_dict() == {1: True, 64: False}
    fig = sweep_heatmaps(df, "block_size", "max_num_seqs")
    hatched = [[pa for pa in ax.patches if pa.get_hatch()] for ax in fig.axes if ax.get_images()]
    assert all(len(h) == 2 for h in hatched)                     # the two max_num_seqs=1 cells, every panel
    assert "2 overloaded cell(s) hatched" in fig._suptitle.get_text()  # type: ignore[union-attr]


def test_a_failed_points_missing_flag_stays_boolean(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("".join(SLICE.read_text().splitlines(keepends=True)[:21]))
    store = SweepStore(tmp_path / "sw")
    for pt in expand({"model": ["llama-3.1-8b", "no-such-model"]}, {"cost_model": "constant:0.01"}, p):
        store.append(run_point(pt))
    df = store.compact()
    assert df["overloaded"].dtype == "boolean" and df["overloaded"].isna().sum() == 1


def test_make_trace_round_trip_is_judged() -> None:
    rows = [{"arrival_s": float(i), "prompt_tokens": 8, "output_tokens": 4} for i in range(12)]
    res = simulate(make_config(cost_model="constant:0.01", num_gpu_blocks=64, max_model_len=256), make_trace(rows))
    assert res.summary.load.offered_rps == 1.0 and not res.summary.load.overloaded
