"""`kvsim simulate` and `kvsim budget` as a user runs them: files, columns, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REQ_COLS = {"request_id", "arrival_s", "prompt_tokens", "output_tokens", "status", "reject_reason",
            "first_scheduled_s", "first_token_s", "finish_s", "first_scheduled_step", "finish_step",
            "num_preemptions", "prefix_hit_tokens"}
STEP_COLS = {"step", "start_s", "duration_s", "num_running", "num_waiting", "prefill_tokens",
             "decode_tokens", "free_blocks", "token_state_slots", "reserved_slots",
             "internal_frag_slots", "external_frag_slots", "free_slots"}


def kvsim(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sim.cli.main", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_simulate_with_no_arguments_runs_the_bundled_trace(tmp_path: Path) -> None:
    p = kvsim("simulate", "--out", str(tmp_path / "run"))
    assert p.returncode == 0, p.stderr
    out = tmp_path / "run"
    req = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")
    summary = json.loads((out / "summary.json").read_text())
    assert set(req.columns) >= REQ_COLS and set(steps.columns) >= STEP_COLS
    assert len(req) == 500 and set(req["status"]) <= {"finished", "rejected"}
    cats = ["token_state_slots", "reserved_slots", "internal_frag_slots", "external_frag_slots", "free_slots"]
    assert steps[cats].sum(axis=1).nunique() == 1
    for k in ("config", "cost_model", "num_gpu_blocks", "throughput", "ttft_s", "tpot_s", "e2e_s",
              "memory", "preemptions", "prefix_cache"):
        assert k in summary
    assert set(summary["timings"]) == {"load_s", "simulate_s", "write_s"}
    # the default cost model is the calibrated one; every output says what its step times rest on
    assert summary["cost_model"].startswith("calibrated (h100, tp=1, vllm-v1 stack")
    # vllm-v1 was fitted end to end on H100 at TP 1 (issue 16), but on prompts of 566-788 tokens: the
    # bundled trace's run past that regime, and the summary says so and how far; its held-out band is an
    # interval around 0 that is not empty (the refit errs slow, so its pessimistic edge is 0)
    lo, hi = summary["cost_band"]
    assert summary["cost_basis"] == "extrapolated" and lo <= 0 <= hi and lo < hi
    assert summary["cost_regime"]["basis"] == "extrapolated" and "prompt p95" in summary["cost_regime"]["detail"]
    assert "step-time basis" in p.stdout
    assert "kvsim" in p.stdout and "TTFT" in p.stdout


def test_bad_trace_row_is_one_line_naming_file_line_and_field(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,5\n0.5,abc,5\n")
    p = kvsim("simulate", str(f), "--out", str(tmp_path / "o"))
    assert p.returncode != 0
    err = p.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert "t.csv:3" in err and "prompt_tokens" in err


@pytest.mark.parametrize("args,needle", [
    (["--block-size", "0"], "--block-size"),
    (["--gpu", "tpu-v9"], "--gpu"),
    (["--allocator", "buddy"], "--allocator"),
    (["--cost-model", "constant:-1"], "--cost-model"),
    (["--kv-memory", "12"], "--kv-memory"),
    (["--model", "llama-3.1-70b", "--gpu", "h100"], "no memory left"),
])
def test_impossible_or_malformed_flags_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    p = kvsim("simulate", "--out", str(tmp_path / "o"), *args)
    assert p.returncode != 0
    err = p.stderr.strip()
    assert "Traceback" not in err and needle in err and len(err.splitlines()) == 1


def test_config_yaml_takes_the_flag_keys_and_flags_win(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("block-size: 32\nmax_model_len: 8192\ncost_model: constant:0.02\n")
    p = kvsim("simulate", "--config", str(cfg), "--block-size", "8", "--out", str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["config"]["block_size"] == 8 and s["config"]["max_model_len"] == 8192
    assert s["cost_model"] == "constant:0.02"
    cfg.write_text("blok_size: 32\n")
    p = kvsim("simulate", "--config", str(cfg), "--out", str(tmp_path / "o2"))
    assert p.returncode != 0 and "unknown key 'blok_size'" in p.stderr


def test_budget_json_is_one_object_with_the_log_lines() -> None:
    p = kvsim("budget", "--json", "--kv-memory", "50GB", "--max-model-len", "8192")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["num_gpu_blocks"] == 23_841 and d["bytes_per_token"] == 131_072
    assert d["bytes_per_block"] == 2_097_152
    assert d["log_lines"][0] == "GPU KV cache size: 381,456 tokens"


def test_budget_prints_vllm_log_lines() -> None:
    p = kvsim("budget", "--model", "opt-13b", "--gpu", "a100-40gb", "--kv-memory", "12GiB", "--block-size", "16")
    assert p.returncode == 0, p.stderr
    assert "GPU KV cache size:" in p.stdout and "Maximum concurrency for 2,048 tokens per request" in p.stdout
