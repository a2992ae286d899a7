"""What a newcomer reads: the summary table and ``trace info`` in readable units, and the notes
that say what kvsim did to their input (issue 12 items 4 and 8)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim.io import fmt

cli_main._load()
runner = CliRunner()
SLICE = str(Path(__file__).resolve().parents[1] / "workloads" / "data" / "azure_conv_slice.csv")
DURATION = r"-?[\d,]+(\.\d+)? (ms|s|min|h)"
UNSORTED = "arrival_s,prompt_tokens,output_tokens\n0,50,4\n3,60,4\n1,70,4\n2,80,4\n4,90,4\n"


def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(cli_main.app, list(args), env={"COLUMNS": "160"})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output


def test_trace_info_one_number_format_per_line() -> None:
    code, out = kvsim("trace", "info", SLICE)
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split() == ["requests", "500", "over", "2.15", "min,", "mean", "rate", "3.88", "req/s"]
    assert "inter-arrival CV 1.29, peak 10 req in one second, per-minute rate 0.733..4.42 req/s" in lines[2]
    assert lines[3].split() == ["prompt_tokens", "mean", "935", "p50", "998", "p90", "1,314", "p99", "4,088",
                                "min", "2", "max", "4,107"]
    assert not re.search(r"\de[+-]\d", out), "no scientific notation"


def test_simulate_table_shows_latencies_in_units_and_the_resort_note(tmp_path: Path) -> None:
    tr = tmp_path / "unsorted.csv"
    tr.write_text(UNSORTED)
    code, out = kvsim("simulate", str(tr), "--out", str(tmp_path / "run"), "--cost-model", "constant:0.5",
                      "--num-gpu-blocks", "100", "--max-model-len", "512")
    assert code == 0, out
    row = {m.group(1).strip(): m.group(2).strip() for m in re.finditer(r"│ (.+?) +│ +(.+?) │", out)}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    ttft = summary["ttft_s"]
    assert 0.5 <= ttft["p50"] < 60  # constant 0.5 s steps: a first token takes a step or two
    assert re.fullmatch(rf"{DURATION} / {DURATION} / {DURATION}", row["TTFT p50/p90/p99"]), row
    assert row["TTFT p50/p90/p99"] == fmt.durations([ttft["p50"], ttft["p90"], ttft["p99"]])
    assert row["simulated time"] == fmt.duration(summary["simulated_s"])
    assert "re-sorted by arrival time: 2 of 5 rows" in row["trace note"]
    assert summary["trace"]["notes"] == ["re-sorted by arrival time: 2 of 5 rows arrive before a row above "
                                         "them (first at line 4)"]


def test_trace_info_and_convert_say_rows_were_resorted(tmp_path: Path) -> None:
    tr = tmp_path / "unsorted.csv"
    tr.write_text(UNSORTED)
    code, out = kvsim("trace", "info", str(tr))
    assert code == 0 and "note: re-sorted by arrival time: 2 of 5 rows" in out
    code, out = kvsim("trace", "info", str(tr), "--json")
    assert any("re-sorted" in n for n in json.loads(out)["notes"])
    code, out = kvsim("trace", "convert", str(tr), str(tmp_path / "u.parquet"))
    assert code == 0 and "re-sorted by arrival time" in out
