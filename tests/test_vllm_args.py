"""A user's production config as they have it (issue 20, items 4-7): a pasted `vllm serve` line,
HF model ids, vLLM's spellings, the server's batch defaults, every simulate flag in `plan` and
`budget`, and rates (--rate-scale, --total-rate)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sim import make_config, simulate
from sim.cli.main import _load, app
from sim.cli.notices import check_servegen_rate
from sim.config.vllm_args import parse_vllm_serve
from sim.memory.budget import budget_for
from sim.model.catalog import hf_ids, model_catalog, resolve_model
from tests.helpers import BUNDLED

_load()
runner = CliRunner()

PASTE = ("vllm serve meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0 --port 8000 --served-model-name llama prod "
         "--trust-remote-code --disable-log-requests --api-key sk-x -tp 1 -pp 1 --data-parallel-size 1 "
         "--max-num-seqs 64 --max-model-len 16k --scheduling-policy priority --long-prefill-token-threshold 512 "
         "--max-num-partial-prefills 1 --enforce-eager --dtype bfloat16 --cpu-offload-gb 0 --no-async-scheduling "
         "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}' --enable-prefix-caching")


def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def test_a_pasted_vllm_serve_line_is_taken_whole_after_double_dash(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, text = kvsim("simulate", str(BUNDLED), "--out", str(out), "--cost-model", "constant:0.01",
                       "--", *shlex.split(PASTE))
    assert code == 0, text
    cfg = json.loads((out / "summary.json").read_text())["config"]
    assert cfg["model"] == "meta-llama/Llama-3.1-8B-Instruct"   # the model in first position, not the trace
    assert (cfg["max_num_seqs"], cfg["max_model_len"], cfg["policy"]) == (64, 16000, "priority")
    assert (cfg["long_prefill_token_threshold"], cfg["enforce_eager"]) == (512, True)
    assert (cfg["num_speculative_tokens"], cfg["speculative_method"]) == (3, "ngram")
    assert cfg["usage_context"] == "openai-server"
    ignored = next(line for line in text.splitlines() if "ignored" in line)
    for flag in ("--host", "--port", "--served-model-name", "--trust-remote-code", "--disable-log-requests", "--api-key"):
        assert flag in ignored


def test_the_same_line_as_vllm_args_and_kvsim_flags_win(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, text = kvsim("simulate", str(BUNDLED), "--out", str(out), "--cost-model", "constant:0.01",
                       "--vllm-args", PASTE, "--max-num-seqs", "32")
    assert code == 0, text
    cfg = json.loads((out / "summary.json").read_text())["config"]
    assert cfg["max_num_seqs"] == 32 and cfg["policy"] == "priority"


@pytest.mark.parametrize("line, what", [
    ("-pp 2", "--pipeline-parallel-size 2"), ("--data-parallel-size 2", "data parallelism"),
    ("--cpu-offload-gb 8", "weight offload"), ("--max-num-partial-prefills 4", "partial prefills"),
    ("--quantization awq", "--quantization awq"), ("--dtype float32", "dtype"),
    ("--speculative-config '{\"method\": \"medusa\", \"num_speculative_tokens\": 2}'", "medusa"),
    ("--some-future-flag 3", "--some-future-flag"),
])
def test_what_kvsim_does_not_model_is_refused_in_one_line(line: str, what: str, tmp_path: Path) -> None:
    code, text = kvsim("simulate", str(BUNDLED), "--out", str(tmp_path / "r"),
                       "--vllm-args", f"vllm serve meta-llama/Llama-3.1-8B-Instruct {line}")
    assert code == 2
    assert text.strip().startswith("error: not modelled:") and what in text and "No such option" not in text
    assert len(text.strip().splitlines()) == 1


def test_vllm_spellings_and_values() -> None:
    c = parse_vllm_serve(["serve", "Qwen/Qwen2.5-7B-Instruct", "--max_num_seqs=8", "--max-model-len", "8K",
                          "--tensor-parallel-size=2", "--no-enable-chunked-prefill", "--kv-cache-dtype", "fp8",
                          "--num-gpu-blocks-override", "1000", "--kv-cache-memory-bytes", "20G", "-O3"]).config
    assert c["model"] == "Qwen/Qwen2.5-7B-Instruct" and c["max_num_seqs"] == 8 and c["max_model_len"] == 8192
    assert c["tensor_parallel_size"] == 2 and c["chunked_prefill"] is False and c["kv_cache_dtype"] == "fp8"
    assert c["num_gpu_blocks"] == 1000 and c["kv_memory"] == f"{20 * 2**30}B"
    assert parse_vllm_serve("vllm serve gpt-oss-20b --quantization mxfp4").config["model"] == "gpt-oss-20b"
    spec = parse_vllm_serve("vllm serve x --speculative-config '{\"method\": \"deepseek_mtp\", \"num_speculative_tokens\": 1}'")
    assert spec.config["speculative_method"] == "mtp"


def test_hugging_face_ids_of_catalog_models_resolve() -> None:
    assert resolve_model("meta-llama/Llama-3.1-8B-Instruct").key == "llama-3.1-8b"
    assert resolve_model("qwen/qwen3-32b").key == "qwen3-32b"  # HF ids are case-insensitive
    ids = hf_ids()
    assert set(ids.values()) == set(model_catalog())       # every entry has at least one
    make_config(model="openai/gpt-oss-20b")                 # and a config takes it
    assert budget_for(make_config(model="meta-llama/Llama-3.1-8B-Instruct")).model == "llama-3.1-8b"


def test_vllm_serve_batch_defaults_by_gpu_and_the_context_is_named(tmp_path: Path) -> None:
    h100 = budget_for(make_config(gpu="h100"))
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)   # OPENAI_API_SERVER
    a100 = budget_for(make_config(gpu="a100-80gb"))
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    offline = budget_for(make_config(gpu="h100", usage_context="llm-class"))
    assert (offline.max_num_batched_tokens, offline.max_num_seqs) == (16384, 1024)
    code, text = kvsim("budget", "--json", "--usage-context", "llm-class")
    assert code == 0 and json.loads(text)["usage_context"] == "llm-class"
    res = simulate(make_config(cost_model="constant:0.01"), _tiny())
    assert res.summary.to_json()["config"]["usage_context"] == "openai-server"


def _tiny() -> object:
    from tests.conftest import make_trace

    return make_trace([{"arrival_s": 0.1 * i, "prompt_tokens": 100, "output_tokens": 5} for i in range(20)])


def test_budget_and_cost_predict_take_the_flags_users_paste() -> None:
    code, text = kvsim("budget", "--json", "--enable-prefix-caching", "--", "vllm", "serve",
                       "meta-llama/Llama-3.1-8B-Instruct", "-tp", "2", "--port", "8000")
    assert code == 0, text
    assert json.loads(text.splitlines()[-1])["tensor_parallel_size"] == 2
    code, text = kvsim("cost", "predict", "-tp", "2", "--decode", "--batch", "4", "--context", "100")
    assert code == 0 and "tp=2" in text
    code, text = kvsim("cost", "predict", "--model", "llama-3.1-70b", "--gpu", "l4", "--decode")
    assert code == 2 and "cannot run" in text


def test_plan_takes_every_simulate_flag(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("swap_space: 2\n")
    out = tmp_path / "plan"
    code, text = kvsim("plan", str(BUNDLED), "--gpu", "h100", "--slo-ttft-p90", "2", "--seeds", "1", "--window", "200",
                       "--search-iters", "0", "--workers", "1", "--no-band", "--no-validate", "--out", str(out),
                       "--kv-cache-dtype", "fp8", "--config", str(cfg), "--kv-offloading-size", "4",
                       "--total-rate", "2", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "1")
    assert code == 0, text
    inputs = yaml.safe_load((out / "inputs.yaml").read_text())
    base = inputs["base_config"]
    assert base["kv_cache_dtype"] == "fp8" and base["swap_space"] == 2 and base["kv_offloading_size"] == 4
    assert inputs["model"] == "meta-llama/Llama-3.1-8B-Instruct" and inputs["load"]["target_qps"] == 2


def test_rate_scale_and_total_rate_rescale_arrivals() -> None:
    from workloads import load_trace

    tr = load_trace(BUNDLED)
    kw = dict(cost_model="constant:0.001")
    base = simulate(make_config(**kw), tr).requests["arrival_s"].to_numpy()
    fast = simulate(make_config(rate_scale=2.0, **kw), tr).requests["arrival_s"].to_numpy()
    assert np.allclose(fast, base / 2)
    ten = simulate(make_config(total_rate=10.0, **kw), tr).requests["arrival_s"].to_numpy()
    assert len(ten) / (ten.max() - ten.min()) == pytest.approx(10.0)


def test_servegen_absolute_rates_get_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    df = pd.DataFrame({"arrival_s": np.linspace(0, 10, 7921)})
    sg = SimpleNamespace(format="servegen", df=df, path="m-large.tar.xz")
    check_servegen_rate(sg)
    err = capsys.readouterr().err
    assert "warning:" in err and "792" in err and "--total-rate" in err
    check_servegen_rate(sg, total_rate=5.0)
    assert capsys.readouterr().err == ""


def test_plan_and_sweep_help_list_every_simulate_flag_and_the_rate_flags() -> None:
    from sim.cli.options import SIMULATE_FLAGS

    infos = [a.__metadata__[0] for a in SIMULATE_FLAGS.values()]
    names = [str(i.param_decls[0] if i.param_decls else i.default) for i in infos]  # typer: the first decl
    for cmd in ("plan", "sweep", "simulate", "budget"):
        code, text = kvsim(cmd, "--help")
        assert code == 0
        missing = [n for n in names if n.split("/")[0] not in text]
        assert missing == [], (cmd, missing)
        assert "--total-rate" in text and "--rate-scale" in text
