"""Malformed input gives one clear error naming file and line; --skip-bad counts instead."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sim.errors import TraceError
from workloads import detect_format, load_trace
from workloads.readers.base import ReadOptions

AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BG = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
LEN = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
VID = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
NORM = "arrival_s,prompt_tokens,output_tokens\n"


def _mc(ts: object, inp: object, out: object, hashes: object) -> str:
    return json.dumps({"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": hashes}) + "\n"


GOOD_MC = _mc(0, 600, 5, [0, 1])
# name -> (file name, content, expected line, text expected in the message)
BAD = {
    "azure_timestamp": ("a.csv", AZ + "2023-11-16 18:15:46.6805900,10,5\nyesterday,10,5\n", 3, "TIMESTAMP"),
    "azure_tokens": ("a.csv", AZ + "2023-11-16 18:15:46.6805900,10,5\n2023-11-16 18:15:47.0,ten,5\n", 3, "ContextTokens"),
    "azure_zero_prompt": ("a.csv", AZ + "2023-11-16 18:15:46.6805900,0,5\n2023-11-16 18:15:47.0,3,5\n", 2, ">= 1"),
    "azure_fields": ("a.csv", AZ + "2023-11-16 18:15:46.6805900,10,5\n2023-11-16 18:15:47.0,1,2,3\n", 3, "fields"),
    "burstgpt_tokens": ("b.csv", BG + "5,ChatGPT,12,x,12,Conversation log\n6,ChatGPT,12,3,15,API log\n", 2, "Response tokens"),
    "burstgpt_time": ("b.csv", BG + "1,ChatGPT,12,3,15,Conversation log\n-4,ChatGPT,12,3,15,API log\n", 3, "Timestamp"),
    "mooncake_json": ("m.jsonl", GOOD_MC + '{"timestamp": 1,\n', 2, "invalid JSON"),
    "mooncake_missing": ("m.jsonl", GOOD_MC + GOOD_MC + json.dumps({"timestamp": 3, "input_length": 5}) + "\n", 3, "output_length"),
    "mooncake_hashes": ("m.jsonl", GOOD_MC + _mc(1, 2000, 5, [0, 1]), 2, "hash_ids"),
    "mooncake_hash_type": ("m.jsonl", GOOD_MC + _mc(1, 10, 5, ["a"]), 2, "hash_ids"),
    "lengths": ("l.csv", LEN + "10,5,15,2\n10,-5,5,2\n", 3, "num_decode_tokens"),
    "vidur": ("v.csv", VID + "0.5,10,5\n0.7,1.5,5\n", 3, "num_prefill_tokens"),
    "normalized_csv": ("n.csv", NORM + "0,10,5\n1,10,\n", 3, "output_tokens"),
    "normalized_jsonl": ("n.jsonl", '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 1}\n'
                         '{"arrival_s": "soon", "prompt_tokens": 3, "output_tokens": 1}\n', 2, "arrival_s"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_row_names_file_line_and_field(tmp_path: Path, name: str) -> None:
    fname, text, line, needle = BAD[name]
    p = tmp_path / fname
    p.write_text(text)
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}:{line}:"), msg
    assert needle in msg
    assert "\n" not in msg


@pytest.mark.parametrize("name", sorted(BAD))
def test_skip_bad_counts_and_lists_the_rows(tmp_path: Path, name: str) -> None:
    fname, text, line, _ = BAD[name]
    p = tmp_path / fname
    p.write_text(text)
    tr = load_trace(p, skip_bad=True)
    assert tr.num_bad_rows == 1
    assert tr.bad_rows[0].startswith(f"{p}:{line}:")
    assert line not in set(tr.df["source_line"])
    assert any("skipped 1 bad rows" in n for n in tr.notes)


def test_skip_bad_keeps_line_numbers_after_a_dropped_csv_line(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text(AZ + "2023-11-16 18:15:46.0,10,5\n2023-11-16 18:15:47.0,1,2,3\n2023-11-16 18:15:48.0,7,1\n")
    tr = load_trace(p, skip_bad=True)
    assert list(tr.df["source_line"]) == [2, 4]
    assert list(tr.df["prompt_tokens"]) == [10, 7]


def test_parquet_errors_name_the_row(tmp_path: Path) -> None:
    p = tmp_path / "t.parquet"
    pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 0], "output_tokens": [1, 1]}).to_parquet(p)
    with pytest.raises(TraceError, match=rf"^{p}:2: field 'prompt_tokens' must be >= 1"):
        load_trace(p)


def test_burstgpt_drops_failed_requests_and_filters(tmp_path: Path) -> None:
    p = tmp_path / "b.csv"
    p.write_text(BG + "0,ChatGPT,10,5,15,Conversation log\n1,GPT-4,10,0,10,Conversation log\n"
                 "2,GPT-4,20,4,24,API log\n3,ChatGPT,30,0,30,API log\n4,GPT-4,40,2,42,Conversation log\n")
    tr = load_trace(p)
    assert detect_format(p) == "burstgpt"
    assert list(tr.df["prompt_tokens"]) == [10, 20, 40]
    assert "dropped 2 failed requests (Response tokens == 0)" in tr.notes
    gpt4 = load_trace(p, opts=ReadOptions(models=("GPT-4",), log_types=("Conversation log",)))
    assert list(gpt4.df["prompt_tokens"]) == [40]
    assert list(gpt4.df["arrival_s"]) == [0.0]  # rebased to the first kept request
    assert "dropped 1 failed requests (Response tokens == 0)" in gpt4.notes


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("foo,bar\n1,2\n")
    with pytest.raises(TraceError, match=r"x.csv:1: unrecognised trace format"):
        load_trace(p)
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="unknown --format 'bogus'"):
        load_trace(p, fmt="bogus")


def test_missing_column_is_reported(tmp_path: Path) -> None:
    p = tmp_path / "v.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n1,2,3\n")
    with pytest.raises(TraceError, match=r":1: field 'TIMESTAMP' missing column"):
        load_trace(p, fmt="azure")


def test_format_override_and_detection(tmp_path: Path) -> None:
    p = tmp_path / "v.csv"
    p.write_text(VID + "0.5,10,5\n0.2,11,6\n")
    tr = load_trace(p)
    assert tr.format == "vidur"
    assert list(tr.df["prompt_tokens"]) == [11, 10]  # sorted by arrival


def test_corrupt_servegen_archive(tmp_path: Path) -> None:
    p = tmp_path / "s.tar.xz"
    p.write_bytes(b"\xfd7zXZ\x00garbage")
    assert detect_format(p) == "servegen"
    with pytest.raises(TraceError, match=r"not a ServeGen tar\.xz archive"):
        load_trace(p)


def test_length_table_poisson_arrivals_are_seeded(tmp_path: Path) -> None:
    p = tmp_path / "l.csv"
    p.write_text(LEN + "".join(f"{i + 1},{i + 2},0,0\n" for i in range(50)))
    a = load_trace(p, opts=ReadOptions(rate=2.0, seed=3)).df
    b = load_trace(p, opts=ReadOptions(rate=2.0, seed=3)).df
    assert a["arrival_s"].equals(b["arrival_s"]) and a["arrival_s"].iloc[-1] > 0
    assert (load_trace(p).df["arrival_s"] == 0).all()
