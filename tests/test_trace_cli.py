"""``kvsim trace`` as a user runs it: info, convert, gen, slice and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import sim.cli.main as cli_main
from tests.conftest import NO_DATA, SHARED_TRACES

TRACES = SHARED_TRACES
CONV = TRACES / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
MOON = TRACES / "mooncake_fast25/conversation_trace.jsonl"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=NO_DATA)
runner = CliRunner()
cli_main._load()


def kvsim(*args: str) -> tuple[int, str]:
    """Run as a user does: the app itself turns user errors into one line and exit code 2."""
    res = runner.invoke(cli_main.app, ["trace", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


@needs_traces
def test_info_json_matches_readme_for_azure_conv() -> None:
    code, out = kvsim("info", str(CONV), "--json")
    assert code == 0
    s = json.loads(out)
    assert s["num_requests"] == 19366
    assert {"mean", "p50", "p90", "p99"} <= s["prompt_tokens"].keys()
    assert (round(s["prompt_tokens"]["mean"], 1), s["prompt_tokens"]["p50"], s["prompt_tokens"]["p90"]) == (1154.7, 1020, 2734.5)
    assert (s["output_tokens"]["p99"], round(s["rate_per_s"], 3), round(s["interarrival_cv"], 2)) == (601, 5.530, 1.09)
    assert s["peak_per_s"] == 16 and "prefix_reuse" not in s


@needs_traces
def test_info_mooncake_shows_prefix_reuse_and_plots(tmp_path: Path) -> None:
    png = tmp_path / "m.png"
    code, out = kvsim("info", str(MOON), "--plot", str(png))
    assert code == 0
    assert "prefix reuse    36.6% of 288,500 block refs" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


@needs_traces
def test_convert_roundtrips_through_parquet(tmp_path: Path) -> None:
    out = tmp_path / "m.parquet"
    code, _ = kvsim("convert", str(MOON), str(out))
    assert code == 0
    df = pd.read_parquet(out)
    assert list(df.columns[:3]) == ["arrival_s", "prompt_tokens", "output_tokens"]
    assert len(df) == 12031 and "source_line" not in df.columns
    code, text = kvsim("info", str(out), "--json")
    assert json.loads(text)["prefix_reuse"] == pytest.approx(0.36641, abs=1e-5)


def test_convert_sorts_unsorted_input_and_rebases(tmp_path: Path) -> None:
    src = tmp_path / "a.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:05.0,5,1\n"
                   "2023-11-16 18:00:01.5,7,2\n2023-11-16 18:00:09.0,9,3\n")
    out = tmp_path / "a.parquet"
    assert kvsim("convert", str(src), str(out))[0] == 0
    df = pd.read_parquet(out)
    assert list(df["arrival_s"]) == [0.0, 3.5, 7.5]
    assert list(df["prompt_tokens"]) == [7, 5, 9]


def test_convert_skip_bad_reports(tmp_path: Path) -> None:
    src = tmp_path / "v.csv"
    src.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,1\n1,x,2\n2,9,3\n")
    code, out = kvsim("convert", str(src), str(tmp_path / "v.parquet"))
    assert code == 2 and f"{src}:3: field 'num_prefill_tokens' not a whole number" in out
    code, out = kvsim("convert", str(src), str(tmp_path / "v.parquet"), "--skip-bad")
    assert code == 0 and "skipped 1 bad rows" in out and "wrote 2 requests" in out


def test_gen_then_slice(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("seed: 1\nduration_s: 100\narrivals: {kind: poisson, rate: 10}\n"
                    "prompt: {kind: uniform, low: 10, high: 20}\noutput: {kind: fixed, value: 3}\n")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert kvsim("gen", str(spec), str(a))[0] == 0
    assert kvsim("gen", str(spec), str(b))[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b))
    assert kvsim("gen", str(spec), str(b), "--seed", "2")[0] == 0
    assert not pd.read_parquet(a).equals(pd.read_parquet(b))
    cut = tmp_path / "cut.jsonl"
    code, _ = kvsim("slice", str(a), str(cut), "--start", "20", "--duration", "40", "--rate-scale", "2",
                    "--sample", "0.5", "--seed", "3")
    assert code == 0
    full = pd.read_parquet(a)
    window = full[(full["arrival_s"] >= 20) & (full["arrival_s"] < 60)]
    got = pd.read_json(cut, lines=True)
    assert 0 < len(got) < len(window)
    assert got["arrival_s"].max() < 20 and got["arrival_s"].min() >= 0
    assert set(got["request_id"].astype(str)) <= set(window["request_id"])


def test_user_errors_are_one_line(tmp_path: Path) -> None:
    code, out = kvsim("info", str(tmp_path / "missing.csv"))
    assert code == 2 and out.strip().endswith("no such file") and "\n" not in out.strip()
    code, out = kvsim("convert", str(tmp_path / "x.csv"), str(tmp_path / "x.csv"))
    assert code == 2 and "must end in .parquet" in out
