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
    # issue 11 item 4: hash_ids must cover the prompt (2 x 512 = 1024 tokens < 1100)
    "normalized_jsonl_hash_coverage": ("h.jsonl", '{"arrival_s": 0, "prompt_tokens": 1000, "output_tokens": 1, "hash_ids": [1, 2]}\n'
                                       '{"arrival_s": 1, "prompt_tokens": 1100, "output_tokens": 1, "hash_ids": [1, 2]}\n',
                                       2, "'hash_ids' 2 ids x tokens_per_hash 512 cover 1024 tokens, fewer than prompt_tokens 1100"),
    "normalized_csv_hash_coverage": ("h.csv", NORM.strip() + ",hash_ids,tokens_per_hash\n0,32,1,"
                                     '"[7, 8]",16\n1,33,1,"[7, 8]",16\n', 3, "needs at least 3 ids"),
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


def test_hash_ids_that_cover_the_prompt_are_accepted(tmp_path: Path) -> None:
    p = tmp_path / "h.csv"
    p.write_text(NORM.strip() + ',hash_ids,tokens_per_hash\n0,32,1,"[7, 8]",16\n1,17,1,"[7, 9]",16\n')
    tr = load_trace(p)
    assert [list(h) for h in tr.df["hash_ids"]] == [[7, 8], [7, 9]]


def test_jsonl_rows_may_leave_out_optional_keys(tmp_path: Path) -> None:
    p = tmp_path / "o.jsonl"
    p.write_text('{"arrival_s": 0, "prompt_tokens": 600, "output_tokens": 1, "priority": 2, "hash_ids": [1, 2],'
                 ' "tokens_per_hash": 300}\n{"arrival_s": 1, "prompt_tokens": 11, "output_tokens": 1, "hash_ids": [3]}\n')
    tr = load_trace(p)
    assert list(tr.df["priority"]) == [2, 0] and list(tr.df["tokens_per_hash"]) == [300, 512]


@pytest.mark.parametrize("header,missing,fmt", [
    ("TIMESTAMP,ContextTokens", "GeneratedTokens", "azure"),
    ("arrived_at,num_prefill_tokens", "num_decode_tokens", "vidur"),
    ("Timestamp,Model,Request tokens,Total tokens,Log Type", "Response tokens", "burstgpt"),
    ('{"timestamp": 1, "input_length": 5, "hash_ids": [1]}', "output_length", "mooncake"),
])
def test_detection_names_the_missing_column(tmp_path: Path, header: str, missing: str, fmt: str) -> None:
    p = tmp_path / "t.txt"
    p.write_text(header + "\n")
    with pytest.raises(TraceError) as ei:
        detect_format(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}:1: field '{missing}' missing (the header looks like the {fmt} format"), msg


@pytest.mark.parametrize("content,needle", [
    (b"", "empty file"),
    (b"\n  \n", "empty file"),
    (bytes(range(128, 256)) * 8, "not UTF-8 text (undecodable byte at offset 0)"),
    (b"arrival_s\x00\x00", "binary content (a NUL byte at offset 9)"),
    (b"\x1f\x8b\x08\x00rest", "a gzip-compressed file: decompress it first"),
    (b"PK\x03\x04rest", "a zip-compressed file"),
])
def test_empty_binary_and_compressed_files_say_so(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(content)
    for fmt in (None, "azure", "normalized"):  # detected or forced: the same message
        with pytest.raises(TraceError) as ei:
            load_trace(p, fmt=fmt)
        assert str(ei.value) == f"{p}: {needle}" or str(ei.value).startswith(f"{p}: {needle}")
        assert str(ei.value).isascii()


def test_parquet_with_a_text_format_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "t.parquet"
    pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [5], "output_tokens": [1]}).to_parquet(p)
    with pytest.raises(TraceError, match="a Parquet file: --format azure reads text"):
        load_trace(p, fmt="azure")


def test_out_of_order_rows_are_sorted_and_noted(tmp_path: Path) -> None:
    p = tmp_path / "u.csv"
    p.write_text(NORM + "0,5,1\n3,6,1\n1,7,1\n2,8,1\n4,9,1\n")
    tr = load_trace(p)
    assert list(tr.df["prompt_tokens"]) == [5, 7, 8, 6, 9]
    assert "re-sorted by arrival time: 2 of 5 rows arrive before a row above them (first at line 4)" in tr.notes
    p.write_text(NORM + "0,5,1\n0,6,1\n1,7,1\n")  # ties are in order
    assert not any("re-sorted" in n for n in load_trace(p).notes)
