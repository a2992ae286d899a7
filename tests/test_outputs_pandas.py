"""Outputs a pandas user can group by: reject codes apart from their details, NA where a value
does not apply, every knob's resolved value in summary.json, every column in the README."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import simpy

from sim.config.schema import PRESETS, make_config
from sim.engine.replica import NEVER_FITS
from sim.io.records import STEP_COLUMNS
from sim.io.rejects import BATCH_TOKENS, CODES
from sim.io.results import REQUEST_COLUMNS
from sim.request import Request
from sim.run.build import build, new_replica, rejecter
from sim.run.simulate import simulate
from tests.conftest import make_trace

ROOT = Path(__file__).resolve().parents[1]


def rows(*lengths: tuple[int, int]) -> list[dict[str, float]]:
    return [{"arrival_s": 0.1 * i, "prompt_tokens": p, "output_tokens": o} for i, (p, o) in enumerate(lengths)]


def test_one_cause_is_one_category_whatever_the_numbers(tmp_path: Path) -> None:
    """Five prompts too long for max_model_len 256, each by a different amount: one category
    with five rows; the details keep the numbers."""
    tr = make_trace(rows((300, 1), (256, 10), (999, 100), (400, 4), (257, 1), (150, 60), (10, 5)))
    res = simulate(make_config(num_gpu_blocks=64, max_model_len=256, cost_model="constant:0.01"), tr)
    res.write(tmp_path)
    req = pd.read_parquet(tmp_path / "requests.parquet")
    assert req["reject_reason"].dtype == "category" and list(req["reject_reason"].cat.categories) == list(CODES)
    counts = req["reject_reason"].value_counts()
    assert counts.to_dict() == {"max_model_len": 5, "max_num_batched_tokens": 0, "kv_pool": 0}
    assert req["reject_detail"].iloc[0] == "prompt 300 >= max_model_len 256 (no room for an output token)"
    assert req["reject_detail"].nunique() == 5
    done = req[req["status"] == "finished"]
    assert len(done) == 2
    assert done[["reject_reason", "reject_detail", "parent_id"]].isna().all().all()
    assert json.loads((tmp_path / "summary.json").read_text())["rejections"] == {"max_model_len": 5}


def test_a_chunk_larger_than_any_buddy_tree_is_a_kv_pool_rejection() -> None:
    """48 slots (6 MiB of 128 KiB tokens, no null block) are buddy trees of 32 + 16: a 40-token
    request needs a 64-slot chunk."""
    tr = make_trace(rows((30, 10), (10, 6)))
    res = simulate(make_config(allocator="slab", reservation="oracle", kv_memory="6MiB", null_block=False,
                               max_model_len=40, cost_model="constant:0.01"), tr)
    r = res.requests
    assert r["status"].tolist() == ["rejected", "finished"]
    assert r["reject_reason"].iloc[0] == "kv_pool"
    assert r["reject_detail"].iloc[0] == "chunk of 64 slots > largest contiguous region of the KV pool"


def test_prompts_over_the_step_budget_without_chunked_prefill_have_their_own_code() -> None:
    """The budget raises max_num_batched_tokens to max_model_len without chunked prefill (as vLLM
    does), so only a scheduler given a smaller budget meets this rejection."""
    parts = build(make_config(preset="paper-v0", num_gpu_blocks=200, max_model_len=1024))
    parts.sched.max_num_batched_tokens = 512
    reject = rejecter(parts.budget, parts.kv, parts.sched)
    r = Request(uid=0, request_id="0", arrival_s=0.0, prompt_tokens=600, output_tokens=2)
    assert reject(r) == (BATCH_TOKENS, "prompt 600 > max_num_batched_tokens 512 (no chunked prefill)")
    assert reject(Request(uid=1, request_id="1", arrival_s=0.0, prompt_tokens=500, output_tokens=2)) is None


def test_a_request_an_idle_engine_cannot_admit_is_a_kv_pool_rejection() -> None:
    """The engine's own fallback, behind the arrival check: a 200-token prompt in 11 usable
    blocks of 16 cannot be admitted by an idle engine, so the engine rejects it and goes on."""
    env = simpy.Environment()
    rep = new_replica(env, make_config(num_gpu_blocks=12, max_model_len=176, cost_model="constant:0.01"))
    rep.reject = None  # skip the arrival check that would catch it first
    big, small = (Request(uid=i, request_id=str(i), arrival_s=0.0, prompt_tokens=p, output_tokens=2)
                  for i, p in enumerate((200, 16)))
    rep.submit_all([big, small])
    env.run()
    assert rep.rejected == [big] and rep.finished == [small]
    assert (big.reject_reason, big.reject_detail) == ("kv_pool", NEVER_FITS)


def test_summary_config_holds_the_value_each_preset_knob_had() -> None:
    tr = make_trace(rows((20, 4), (30, 4)))
    for preset in PRESETS:
        res = simulate(make_config(preset=preset, num_gpu_blocks=64, max_model_len=512, free_order="tail",
                                   cost_model="constant:0.01"), tr)
        doc = res.summary.to_json()
        cfg = doc["config"]
        for knob, value in PRESETS[preset].items():
            assert cfg[knob] == ("tail" if knob == "free_order" else value), (preset, knob)
        assert cfg["max_model_len"] == 512 and cfg["max_num_seqs"] == res.summary.budget["max_num_seqs"]
        assert cfg["max_num_batched_tokens"] == res.summary.budget["max_num_batched_tokens"]
        assert cfg["victim"] == "last"
        assert "free_order" not in doc["config_defaults"] and "max_model_len" not in doc["config_defaults"]
        assert {"null_block", "watermark", "max_num_seqs", "victim"} <= set(doc["config_defaults"])
        filled = (*PRESETS[preset], "max_model_len", "max_num_seqs", "max_num_batched_tokens", "victim")
        assert all(cfg[k] is not None for k in filled)


def test_readme_lists_every_output_column() -> None:
    readme = (ROOT / "README.md").read_text()
    listed = set(re.findall(r"`([a-z0-9_]+)`", readme))
    missing = [c for c in (*REQUEST_COLUMNS, *STEP_COLUMNS) if c not in listed]
    assert not missing, f"README.md does not list {missing}"
