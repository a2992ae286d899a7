"""Bad input to any command is one ``error:`` line and exit code 2, never a traceback.

Every case runs through typer's CliRunner on the real app, so the output is what a user sees.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim.cli.main as cli_main

cli_main._load()
runner = CliRunner()
SLICE = str(Path(__file__).resolve().parents[1] / "workloads" / "data" / "azure_conv_slice.csv")


def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(cli_main.app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output


def assert_one_line_error(code: int, out: str, needle: str) -> None:
    lines = out.strip().splitlines()
    assert code == 2, out
    assert "Traceback" not in out and len(lines) == 1, out
    assert lines[0].startswith("error: ") and needle in lines[0], out
    assert lines[0].isprintable() and lines[0].isascii(), "raw bytes echoed"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    binary = d / "BINARY.csv"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    nul = d / "nul.csv"
    nul.write_bytes(b"arrival_s\x00\x01\x02" * 10)
    empty = d / "empty.csv"
    empty.write_text("")
    notrun = d / "notrun"
    notrun.mkdir()
    badjson = d / "badjson"
    badjson.mkdir()
    (badjson / "summary.json").write_text("{")
    tiny = d / "tiny.csv"
    tiny.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n")
    return {"binary": binary, "nul": nul, "empty": empty, "notrun": notrun, "badjson": badjson, "dir": d,
            "tiny": tiny}


CASES: dict[str, tuple[Callable[[dict[str, Path]], list[str]], str]] = {
    # issue 12 item 5, as reported
    "heatmap missing": (lambda f: ["plot", "heatmap", str(f["dir"] / "MISSING.parquet")], "MISSING.parquet: no such file"),
    "breakdown --sweep missing": (lambda f: ["plot", "breakdown", "--sweep", str(f["dir"] / "MISSING")], "no such file"),
    "heatmap binary csv": (lambda f: ["plot", "heatmap", str(f["binary"])], "not a Parquet file"),
    "report --requests 0": (lambda f: ["report", "paper-fig2", "--requests", "0", "--out", str(f["dir"] / "r")], "--requests 0: must be >= 1"),
    "report --requests -5": (lambda f: ["report", "paper-fig2", "--requests", "-5", "--out", str(f["dir"] / "r")], "--requests -5"),
    "report --rate 0": (lambda f: ["report", "paper-fig2", "--rate", "0", "--out", str(f["dir"] / "r")], "--rate 0.0"),
    # plot inputs
    "heatmap on a directory": (lambda f: ["plot", "heatmap", str(f["dir"])], "is a directory"),
    "cdf of a non-run": (lambda f: ["plot", "cdf", str(f["notrun"])], "not a run directory"),
    "memory with broken summary": (lambda f: ["plot", "memory", str(f["badjson"])], "not valid JSON"),
    "breakdown with nothing": (lambda f: ["plot", "breakdown"], "give run directories or --sweep"),
    "memmap --requests 0": (lambda f: ["plot", "memmap", SLICE, "--requests", "0"], "--requests"),
    "memmap --pool-slots 0": (lambda f: ["plot", "memmap", SLICE, "--pool-slots", "0"], "--pool-slots"),
    "memmap --request past the replay": (lambda f: ["plot", "memmap", SLICE, "--requests", "5", "--request", "7",
                                                    "--out", str(f["dir"] / "p")], "--request 7: the replay has requests 0..4"),
    "blocksize 0": (lambda f: ["plot", "blocksize", SLICE, "--block-sizes", "0,16", "--requests", "5"], "every size must be >= 1"),
    # simulate / budget / sweep
    "unknown flag": (lambda f: ["simulate", "--bogus"], "No such option: --bogus"),
    "flag of the wrong type": (lambda f: ["simulate", "--block-size", "abc"], "--block-size"),
    "binary --config": (lambda f: ["simulate", "--config", str(f["binary"])], "cannot read YAML"),
    "binary --model": (lambda f: ["simulate", "--model", str(f["binary"])], "cannot read config.json"),
    "negative --seed": (lambda f: ["simulate", "--seed", "-1"], "--seed -1"),
    "max-model-len beyond the context": (lambda f: ["budget", "--max-model-len", "200000"],
                                         "greater than Llama-3.1-8B's context length 131,072"),
    "budget --request-tokens 0": (lambda f: ["budget", "--request-tokens", "0"], "--request-tokens"),
    "sweep --jobs 0": (lambda f: ["sweep", SLICE, "--set", "block_size=16", "--jobs", "0"], "--jobs"),
    "binary --grid": (lambda f: ["sweep", SLICE, "--grid", str(f["binary"])], "cannot read YAML"),
    # trace
    "trace info empty": (lambda f: ["trace", "info", str(f["empty"])], "empty file"),
    "trace info binary": (lambda f: ["trace", "info", str(f["binary"])], "not UTF-8 text"),
    "trace info NUL bytes": (lambda f: ["trace", "info", str(f["nul"])], "binary content"),
    "binary with --format": (lambda f: ["trace", "info", str(f["binary"]), "--format", "azure"], "not UTF-8 text"),
    "trace slice negative seed": (lambda f: ["trace", "slice", SLICE, str(f["dir"] / "s.csv"), "--seed", "-1"], "--seed"),
    "trace gen binary spec": (lambda f: ["trace", "gen", str(f["binary"]), str(f["dir"] / "g.csv")], "cannot read the spec"),
    "plan missing trace": (lambda f: ["plan", str(f["dir"] / "nope.csv"), "--slo-ttft-p99", "1"], "no such file"),
    "plan binary --prices": (lambda f: ["plan", SLICE, "--prices", str(f["binary"]), "--slo-ttft-p99", "1"],
                             "an input file is not UTF-8 text"),
    # the OS refuses an output path
    "--out under a file": (lambda f: ["simulate", str(f["tiny"]), "--out", str(f["tiny"] / "run"),
                                      "--cost-model", "constant:0.01"], "tiny.csv/run: Not a directory"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line(name: str, files: dict[str, Path]) -> None:
    args, needle = CASES[name]
    assert_one_line_error(*kvsim(*args(files)), needle)


def test_block_size_vllm_refuses_is_a_warning_listing_the_valid_ones() -> None:
    code, out = kvsim("budget", "--block-size", "4", "--kv-memory", "1GiB", "--max-model-len", "4096")
    assert code == 0
    assert "warning: --block-size 4 is not accepted by vLLM 0.33 (valid: 1, 8, 16, 32, 64, 128, 256)" in out
    code, out = kvsim("budget", "--block-size", "32", "--kv-memory", "1GiB", "--max-model-len", "4096")
    assert code == 0 and "warning" not in out


def test_sweep_with_failed_points_exits_nonzero_and_counts_them(tmp_path: Path) -> None:
    tr = tmp_path / "t.csv"
    tr.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n0.1,12,3\n")
    args = ["sweep", str(tr), "--out", str(tmp_path / "sw"), "--set", "max_model_len=512,200000",
            "--cost-model", "constant:0.01", "--num-gpu-blocks", "200", "--jobs", "1"]
    code, out = kvsim(*args)
    assert code == 1 and "error: 1 of 2 sweep points failed" in out
    assert "context length" in out  # the failed point's reason is listed
    code, out = kvsim(*args)  # a rerun skips both recorded points and still fails
    assert code == 1 and "1 of 2 sweep points failed (rerun with --retry-failed" in out
    code, _ = kvsim(*args[:5], "max_model_len=512", *args[6:])
    assert code == 0


def test_plot_reads_a_good_run(tmp_path: Path) -> None:
    code, out = kvsim("simulate", SLICE, "--out", str(tmp_path / "run"), "--cost-model", "constant:0.01",
                      "--num-gpu-blocks", "300", "--max-model-len", "4096")
    assert code == 0, out
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_requests"] == 500
    code, out = kvsim("plot", "memory", str(tmp_path / "run"), "--out", str(tmp_path / "p"))
    assert code == 0 and "memory_over_time.png" in out
