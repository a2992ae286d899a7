"""The README's Speed figures are rendered from the benches' JSON records, never typed in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.helpers import bench_module

RECORDS = REPO / "bench" / "results" / "speed.jsonl"


def engine_record(loop_s: float, date: str, cost: str = "calibrated (a100-80gb, tp=2, vllm-v1 stack)") -> dict[str, Any]:
    return {"bench": "bench_engine", "date": date, "machine": {"cores": 2, "python": "3.11.7", "load_avg_1m": 1.0},
            "cost_model": cost, "command": "python bench/bench_engine.py", "requests": 19366, "finished": 18950,
            "steps": 93365, "ff_steps": 90413, "preemptions": 2966, "loop_s": loop_s,
            "req_per_s": round(19366 / loop_s), "steps_per_s": round(93365 / loop_s)}


def test_the_newest_record_of_each_bench_is_the_row_and_names_its_cost_model_and_machine() -> None:
    st = bench_module("speed_table")
    old, new = engine_record(3.0, "2026-01-01 00:00 UTC"), engine_record(1.2, "2026-01-02 00:00 UTC", cost="roofline")
    table = st.render([old, new], "x.jsonl")
    rows = [line for line in table.splitlines() if line.startswith("| bench_engine")]
    assert len(rows) == 1
    assert "2026-01-02 00:00 UTC" in rows[0] and "roofline" in rows[0] and "2 cores, Python 3.11.7" in rows[0]
    assert "loop 1.20 s" in rows[0]


@pytest.mark.parametrize(("loop_s", "verdict"), [(1.2, "-- met"), (3.0, "-- not met")])
def test_the_vidur_target_is_judged_from_the_loop_time(loop_s: float, verdict: str) -> None:
    st = bench_module("speed_table")
    row = st.render([engine_record(loop_s, "2026-01-01 00:00 UTC")], "x.jsonl").splitlines()[-1]
    assert row.endswith(verdict + " |")
    assert f"about {66.1 / 1.45 / loop_s:.0f}x (estimate" in row


def test_a_vidur_loop_from_the_same_run_replaces_the_estimate() -> None:
    st = bench_module("speed_table")
    rec = engine_record(2.0, "2026-01-01 00:00 UTC")
    rec["vidur"] = {"version": "0.0.26", "loop_s": 30.0, "batches": 108161, "mean_batch": 37.8}
    row = st.render([rec], "x.jsonl").splitlines()[-1]
    assert "about 15x (measured in the same run) -- not met |" in row
    assert "Vidur 0.0.26 (bench/vidur_loop.py) 30.00 s for 108,161 batches" in row
    rec["vidur"]["loop_s"] = 61.0
    assert st.render([rec], "x.jsonl").splitlines()[-1].endswith("(measured in the same run) -- met |")


def test_rounds_taken_in_turn_judge_the_target_by_their_median_ratio() -> None:
    st = bench_module("speed_table")
    rec = engine_record(1.0, "2026-01-02 00:00 UTC")
    rec["vidur"] = {"version": "0.0.26", "loop_s": 40.0, "batches": 108161, "mean_batch": 37.8}
    rec["vidur_rounds"] = [{"vidur_s": 40.0, "kvsim_s": 1.0, "ratio": 40.0},
                           {"vidur_s": 20.0, "kvsim_s": 1.0, "ratio": 20.0},
                           {"vidur_s": 25.0, "kvsim_s": 1.0, "ratio": 25.0}]
    rec["vidur_ratio_median"] = 25.0
    row = next(line for line in st.render([rec], "x.jsonl").splitlines() if line.startswith("| bench_engine"))
    assert "about 25x (median of 3 rounds in the same run: 40.0x, 20.0x, 25.0x) -- not met" in row
    assert "3 rounds in turn, Vidur / kvsim: 40.0 / 1.00 s, 20.0 / 1.00 s, 25.0 / 1.00 s" in row


def test_bench_engine_records_one_vidur_figure_and_the_median_of_its_rounds() -> None:
    be = bench_module("bench_engine")
    v = {"version": "0.0.26", "loop_s": 30.0}
    assert be.vidur_figures(v, 30.0, [(30.0, 2.0)]) == {"vidur": v}  # not also "same session"
    assert be.vidur_figures(None, 25.0, []) == {"vidur_s_same_session": 25.0}
    three = be.vidur_figures(v, 30.0, [(30.0, 2.0), (20.0, 2.0), (24.0, 1.0)])
    assert [r["ratio"] for r in three["vidur_rounds"]] == [15.0, 10.0, 24.0]
    assert three["vidur_ratio_median"] == 15.0 and three["vidur"] is v


def test_bench_engine_refuses_fewer_than_one_round_and_a_partial_trace_against_vidur() -> None:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "bench/bench_engine.py", "--rounds", "0"], capture_output=True, text=True,
                       cwd=REPO)
    assert p.returncode == 2 and "--rounds must be at least 1, not 0" in p.stderr
    p = subprocess.run([sys.executable, "bench/bench_engine.py", "--limit", "50", "--vidur-python", "py"],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "--limit with --vidur-python" in p.stderr


def test_vidur_loop_rewrites_the_conv_trace_in_vidurs_replay_format(tmp_path: Path) -> None:
    vl = bench_module("vidur_loop")
    conv = tmp_path / "conv.csv"
    conv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    assert vl.write_trace(conv, tmp_path / "v.csv") == 2
    rows = (tmp_path / "v.csv").read_text().splitlines()
    assert rows[0] == "Date,Time,PromptTokenCount,CompletionTokenCount"
    assert rows[1] == "d,0.0,374,44" and rows[2].startswith("d,4.314") and rows[2].endswith(",396,109")
    args = vl.vidur_args(tmp_path / "v.csv", tmp_path)
    assert args[args.index("--replica_config_tensor_parallel_size") + 1] == "2"
    assert args[args.index("--vllm_scheduler_config_batch_size_cap") + 1] == "128"
    fleet = vl.vidur_args(tmp_path / "v.csv", tmp_path, replicas=8, router="lor")
    assert fleet[fleet.index("--cluster_config_num_replicas") + 1] == "8"
    assert fleet[fleet.index("--global_scheduler_config_type") + 1] == "lor"


def test_vidur_loop_answers_bad_input_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vl = bench_module("vidur_loop")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match=r"bad.csv: no column TIMESTAMP"):
        vl.write_trace(bad, tmp_path / "v.csv")
    assert vl.run_vidur(str(tmp_path / "no-python"), bad, tmp_path, tmp_path) is None
    err = capsys.readouterr().err.strip()
    assert err.startswith("vidur_loop: --vidur-python ") and "\n" not in err


def test_a_fleet_record_with_vidur_shows_each_routers_ratio() -> None:
    st = bench_module("speed_table")
    rec = {"bench": "bench_fleet", "date": "d", "cost_model": "c", "command": "python bench/bench_fleet.py",
           "trace": "conv.csv", "replicas": 8, "wall_s": {"round-robin (static)": 5.0, "kv-aware (live)": 10.0},
           "vidur": {"version": "0.0.26", "loop_s": 50.0, "batches": 351775}}
    row = st.render([rec], "x.jsonl").splitlines()[-1]
    assert "in the same run (round-robin (static) 10.0x, kv-aware (live) 5.0x)" in row


def test_a_partial_day_is_not_judged_against_the_full_days_target() -> None:
    st = bench_module("speed_table")
    rec = {"bench": "bench_day", "date": "d", "cost_model": "c", "command": "python bench/bench_day.py --hours 1",
           "requests": 1_000_000, "hours": 1.0, "replayed": 30_000, "finished": 30_000, "replicas": 32,
           "router": "least-outstanding-tokens", "model": "m", "gpu": "g", "steps": 1, "preemptions": 0,
           "ttft_p99_s": 0.07, "wall_s": 10.0, "peak_rss_gib": 0.3}
    assert "not judged (not the full day)" in st.render([rec], "x.jsonl")


def test_a_malformed_record_line_is_one_error_naming_file_and_line(tmp_path: Path) -> None:
    rec = bench_module("record")
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(engine_record(1.0, "d")) + "\n{not json\n")
    with pytest.raises(SystemExit, match=r"r\.jsonl:2: not a JSON record"):
        rec.read(path)


def test_the_readme_speed_block_is_the_rendering_of_the_committed_records() -> None:
    st = bench_module("speed_table")
    table = st.render(bench_module("record").read(RECORDS), "bench/results/speed.jsonl")
    readme = (REPO / "README.md").read_text()
    assert st.splice(readme, table) == readme, "README Speed block is stale: run bench/speed_table.py --readme"
    assert {"bench_engine", "bench_day", "bench_sweep"} <= set(st.newest(bench_module("record").read(RECORDS)))


def test_a_record_missing_a_field_is_one_error_naming_the_bench_and_field() -> None:
    st = bench_module("speed_table")
    rec = engine_record(1.0, "d")
    del rec["loop_s"]
    with pytest.raises(SystemExit, match=r"x\.jsonl: the newest bench_engine record has no field 'loop_s'"):
        st.render([rec], "x.jsonl")


def test_a_record_says_whether_its_loops_were_compiled() -> None:
    st, rec = bench_module("speed_table"), bench_module("record")
    base = {"cores": 2, "python": "3.11.7", "load_avg_1m": 0.5}
    assert "pure Python" in st._machine({"machine": {**base, "compiled_loops": []}})
    assert "compiled loops" in st._machine({"machine": {**base, "compiled_loops": ["a", "b", "c", "d"]}})
    assert "compiled: pool" in st._machine({"machine": {**base, "compiled_loops": ["pool"]}})
    assert "compiled" not in st._machine({"machine": base}) and "pure" not in st._machine({"machine": base})
    assert "compiled loops (5)" in st._machine({"machine": {**base, "compiled_loops": list("abcde")}})
    names = [n for n, _ in rec.cython_modules()]
    assert "kv.block_pool" in names and len(names) == len(set(names))
    assert set(rec.compiled_loops()) <= set(names)


def test_compiled_vs_pure_keeps_one_row_per_what() -> None:
    st = bench_module("speed_table")
    base = {"bench": "bench_compiled", "date": "2026-12-04 12:00 UTC", "machine": {"cores": 2}, "cost_model": "c",
            "command": "python bench/bench_compiled.py", "requests": 10, "rounds": 2}
    recs = [{**base, "what": "engine", "compiled_s": [1.0, 1.0], "pure_s": [1.5, 1.5], "ratio": 1.5},
            {**base, "what": "kv-aware", "compiled_s": [2.0, 2.0], "pure_s": [2.5, 2.5], "ratio": 1.25},
            {**base, "what": "engine", "compiled_s": [1.0, 1.0], "pure_s": [1.2, 1.2], "ratio": 1.2}]
    table = st.render(recs, "x.jsonl")
    assert "| bench_compiled (engine) |" in table and "| bench_compiled (kv-aware) |" in table
    assert "**1.20x**" in table and "**1.50x**" not in table and "8 x 70B, kv-aware" in table
