"""Load as clients make it (issue 49, points 2, 4, 5): `vllm bench serve`'s request rate and burstiness,
its datasets, a pasted bench line, inference-perf configs and `simulate --save-result`. Expected values
come from the definitions (vLLM's gamma gaps rescaled to end at N / R, its length windows, the block
arithmetic of a shared prefix), never from a run."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sim.cli.main import _load, app
from sim.config.vllm_bench import parse_vllm_bench
from sim.errors import ConfigError
from tests.helpers import BUNDLED
from workloads import load_trace
from workloads.bench import build_yaml
from workloads.request_rate import apply_request_rate, arrival_stream, request_rate_arrivals

_load()
FAST, Z = ("--cost-model", "constant:0.01"), 5.0


def kvsim(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception  # no traceback
    return res.exit_code, res.output


def gap_cv_se(k: float, n: int) -> float:
    """SE of the sample CV of n Gamma(shape k) gaps (delta method; central moments with scale 1)."""
    var, mu3, mu4 = k, 2 * k, 3 * k * k + 6 * k
    return math.sqrt(1 / k / n * ((mu4 - var**2) / (4 * var**2) - mu3 / (var * k) + var / k**2))


# ---- rates as vllm bench serve draws them ------------------------------------------------------
@pytest.mark.parametrize("burst", [0.25, 1.0, 4.0])
def test_request_rate_gaps_are_gamma_with_shape_b_and_end_at_n_over_r(burst: float) -> None:
    n, rate = 20_000, 8.0
    t = request_rate_arrivals(n, rate, burst, arrival_stream(3))
    gaps = np.diff(np.r_[0.0, t])
    assert t[-1] == pytest.approx(n / rate, rel=1e-12)        # vLLM's rescaling: the last at N / R
    assert np.all(gaps >= 0)                                  # (shape 0.25: some gaps round to 0)
    cv = gaps.std() / gaps.mean()
    assert abs(cv - 1 / math.sqrt(burst)) < Z * gap_cv_se(burst, n)
    assert np.array_equal(t, request_rate_arrivals(n, rate, burst, arrival_stream(3)))
    assert not np.array_equal(t, request_rate_arrivals(n, rate, burst, arrival_stream(4)))


def test_inf_sends_everything_at_zero_and_infinite_burstiness_is_constant() -> None:
    assert np.array_equal(request_rate_arrivals(7, math.inf, 0.5, arrival_stream(0)), np.zeros(7))
    assert np.allclose(request_rate_arrivals(5, 2.0, math.inf, arrival_stream(0)), [0.5, 1.0, 1.5, 2.0, 2.5])


def test_a_trace_keeps_its_order_and_lengths_and_loses_its_times() -> None:
    tr = load_trace(BUNDLED)
    got = apply_request_rate(tr, 3.0, 1.0, seed=11)
    expect = request_rate_arrivals(tr.num_requests, 3.0, 1.0, arrival_stream(11))
    assert np.array_equal(got.df["arrival_s"].to_numpy(), expect)
    for col in ("prompt_tokens", "output_tokens", "request_id"):
        assert got.df[col].tolist() == tr.df[col].tolist()
    assert any("arrivals replaced" in n for n in got.notes)


def test_simulate_request_rate_replays_the_drawn_times_exactly(tmp_path: Path) -> None:
    code, text = kvsim("simulate", str(BUNDLED), "--out", str(tmp_path / "r"), *FAST, "--request-rate", "6",
                       "--burstiness", "0.5", "--seed", "2")
    assert code == 0, text
    sent = pd.read_parquet(tmp_path / "r" / "requests.parquet").sort_values("arrival_s")["arrival_s"].to_numpy()
    assert np.array_equal(sent, request_rate_arrivals(500, 6.0, 0.5, arrival_stream(2)))


# ---- one-line refusals ---------------------------------------------------------------------------
@pytest.mark.parametrize("extra, what", [
    (["--burstiness", "0", "--request-rate", "2"], "--burstiness"),
    (["--burstiness", "-1", "--request-rate", "2"], "--burstiness"),
    (["--request-rate", "0"], "--request-rate"),
    (["--request-rate", "-3"], "--request-rate"),
    (["--burstiness", "2"], "needs --request-rate"),
    (["--request-rate", "inf", "--burstiness", "2"], "no effect at --request-rate inf"),
    (["--request-rate", "2", "--rate-scale", "2"], "give one"),
    (["--request-rate", "2", "--total-rate", "5"], "give one"),
    (["--save-result", "/nonexistent-dir/r.json"], "no such directory"),
    (["--save-result", "."], "is a directory"),
    (["--", "vllm", "bench", "serve", "--max-concurrency", "0"], "--max-concurrency 0: must be >= 1"),
    (["--", "vllm", "bench", "serve", "--burstiness", "0", "--request-rate", "1"], "--burstiness"),
    (["--", "vllm", "bench", "serve", "--dataset-name", "random", "--random-range-ratio", "1.5"], "range_ratio"),
    (["--", "vllm", "bench", "serve", "--dataset-name", "prefix_repetition", "--num-prompts", "3",
      "--prefix-repetition-num-prefixes", "5"], "num_prefixes"),
    (["--", "vllm", "bench", "serve", "--dataset-name", "hf"], "--dataset-name hf"),
    (["--", "vllm", "bench", "serve", "--ramp-up-strategy", "linear"], "ramp"),
])
def test_bad_load_input_is_one_line(extra: list[str], what: str, tmp_path: Path) -> None:
    trace = [] if "--" in extra else [str(BUNDLED)]
    code, text = kvsim("simulate", *trace, "--out", str(tmp_path / "r"), *FAST, *extra)
    assert code == 2, text
    assert len(text.strip().splitlines()) == 1 and text.startswith("error:") and what in text, text
    assert not (tmp_path / "r").exists()                     # refused before any run


# ---- datasets ----------------------------------------------------------------------------------
def _built(**spec: object) -> pd.DataFrame:
    (b,) = build_yaml(spec, "spec")
    return b.df


def test_random_dataset_windows_and_shared_prefix_ids() -> None:
    df = _built(dataset="random", num_prompts=400, input_len=200, output_len=50, range_ratio=0.25, prefix_len=70)
    inp = df["prompt_tokens"].to_numpy() - 70
    assert inp.min() >= math.floor(200 * 0.75) and inp.max() <= math.ceil(200 * 1.25)
    assert inp.min() < 160 and inp.max() > 240           # the whole window is used, not a corner
    out = df["output_tokens"].to_numpy()
    assert out.min() >= math.floor(50 * 0.75) and out.max() <= math.ceil(50 * 1.25)
    tph = int(df["tokens_per_hash"].iloc[0])
    head = 70 // tph
    heads = {tuple(h[:head]) for h in df["hash_ids"]}
    assert len(heads) == 1                                   # one prefix for all
    tails = [x for h in df["hash_ids"] for x in h[head:]]
    assert len(tails) == len(set(tails))                     # nothing else is shared
    assert all(len(h) == -(-p // tph) for h, p in zip(df["hash_ids"], df["prompt_tokens"], strict=True))


def test_random_prefix_hits_exactly_its_full_blocks(tmp_path: Path) -> None:
    """prefix_len 70 at block size 16: 4 full blocks = 64 tokens hit; the straddling 5th never does."""
    code, text = kvsim("simulate", "--out", str(tmp_path / "r"), *FAST, "--block-size", "16", "--",
                       "vllm", "bench", "serve", "--dataset-name", "random", "--num-prompts", "12",
                       "--random-input-len", "100", "--random-output-len", "4", "--random-prefix-len", "70",
                       "--request-rate", "0.5", "--burstiness", "inf")
    assert code == 0, text
    q = pd.read_parquet(tmp_path / "r" / "requests.parquet").sort_values("arrival_s")
    assert q["prefix_hit_tokens"].tolist() == [0] + [64] * 11


def test_prefix_repetition_groups_hit_their_own_prefix_only(tmp_path: Path) -> None:
    spec = dict(dataset="prefix_repetition", num_prompts=30, num_prefixes=4, prefix_len=48, suffix_len=20,
                output_len=3, request_rate=0.5, burstiness=math.inf, seed=5)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    code, text = kvsim("trace", "gen", str(tmp_path / "s.yaml"), str(tmp_path / "t.parquet"))
    assert code == 0 and "2 of num_prompts 30 dropped" in text, text    # 4 x 7 = 28, as vLLM
    df = pd.read_parquet(tmp_path / "t.parquet")
    head = 48 // int(df["tokens_per_hash"].iloc[0])
    group = [tuple(h[:head]) for h in df["hash_ids"]]
    assert len(df) == 28 and sorted(pd.Series(group).value_counts().tolist()) == [7, 7, 7, 7]
    code, text = kvsim("simulate", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "r"), *FAST)
    assert code == 0, text
    q = pd.read_parquet(tmp_path / "r" / "requests.parquet").sort_values("arrival_s")
    first = ~pd.Series(group).duplicated().to_numpy()
    assert q["prefix_hit_tokens"].tolist() == [0 if f else 48 for f in first]   # 48 = 3 full blocks


def test_sharegpt_rows_pass_vllms_filter_and_oversample_when_short(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    p, o = rng.integers(1, 1500, 300), rng.integers(1, 1500, 300)
    pd.DataFrame({"num_prefill_tokens": p, "num_decode_tokens": o}).to_csv(tmp_path / "lens.csv", index=False)
    ok = (p >= 4) & (p <= 1024) & (o >= 4) & (p + o <= 2048)
    df = _built(dataset="sharegpt", path=str(tmp_path / "lens.csv"), num_prompts=20)
    pairs = set(zip(p[ok].tolist(), o[ok].tolist(), strict=True))
    assert len(df) == 20 and set(zip(df["prompt_tokens"], df["output_tokens"], strict=True)) <= pairs
    (b,) = build_yaml(dict(dataset="sharegpt", path=str(tmp_path / "lens.csv"), num_prompts=int(ok.sum()) + 5), "s")
    assert len(b.df) == int(ok.sum()) + 5 and any("oversampled 5" in n for n in b.notes)


def test_isl_osl_grid_writes_one_trace_per_point_in_either_window(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(dict(dataset="isl_osl", num_prompts=300, range_ratio=0.8,
                                                         range="legacy", points=["1k/1k", "1k/8k", "8k/1k"])))
    code, text = kvsim("trace", "gen", str(tmp_path / "g.yaml"), str(tmp_path / "ix.jsonl"))
    assert code == 0, text
    for isl, osl in ((1024, 1024), (1024, 8192), (8192, 1024)):
        df = load_trace(tmp_path / f"ix_isl{isl}_osl{osl}.jsonl").df
        assert df["prompt_tokens"].between(int(isl * 0.8), isl).all() and df["prompt_tokens"].max() > 0.95 * isl
        assert df["output_tokens"].between(int(osl * 0.8), osl).all()
    (b,) = build_yaml(dict(dataset="isl_osl", num_prompts=300, range_ratio=0.5, points=["1k/8k"]), "g")
    assert b.df["prompt_tokens"].between(512, 1536).all() and b.df["prompt_tokens"].max() > 1400


def test_inference_perf_config_becomes_its_stages_over_shared_prefix(tmp_path: Path) -> None:
    cfg = {"load": {"type": "constant", "interval": 5, "stages": [{"rate": 4, "duration": 10}, {"rate": 9, "duration": 4}]},
           "data": {"type": "shared_prefix", "shared_prefix": {"num_groups": 3, "num_prompts_per_group": 4,
                                                               "system_prompt_len": 96, "question_len": 30, "output_len": 8}},
           "server": {"type": "vllm"}}
    (b,) = build_yaml(cfg, "ip.yaml", seed=1)
    df = b.df
    s0, s1 = df[df["request_id"].str.startswith("s0-")], df[df["request_id"].str.startswith("s1-")]
    assert (len(s0), len(s1)) == (40, 36)                                    # int(rate * duration)
    assert s0["arrival_s"].max() == pytest.approx(10.0) and s0["arrival_s"].min() > 0
    assert s1["arrival_s"].min() > 10.0 + 5 and s1["arrival_s"].max() == pytest.approx(10.0 + 5 + 4)
    assert (df["prompt_tokens"] == 126).all() and (df["output_tokens"] == 8).all()
    # request j sends prompt j mod 12: its ids repeat exactly; a group's head is shared by 4 prompts
    ids = [tuple(h) for h in s0["hash_ids"]]
    assert all(ids[j] == ids[j % 12] for j in range(len(ids))) and len(set(ids[:12])) == 12
    head = 96 // int(df["tokens_per_hash"].iloc[0])
    assert sorted(pd.Series([i[:head] for i in ids[:12]]).value_counts().tolist()) == [4, 4, 4]
    assert any("ignored" in n and "server" in n for n in b.notes)


@pytest.mark.parametrize("patch, what", [
    ({"load": {"type": "concurrent", "stages": [{"num_requests": 5, "concurrency_level": 2}]}}, "not modelled yet: concurrent"),
    ({"load": {"type": "constant", "stages": [{"rate": 0, "duration": 5}]}}, "stages[0].rate"),
    ({"data": {"type": "shareGPT"}}, "shareGPT"),
    ({"data": {"type": "shared_prefix", "shared_prefix": {"question_len": {"mean": 5}}}}, "distribution"),
])
def test_inference_perf_refusals_are_one_line(patch: dict[str, object], what: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_yaml({"load": {"type": "constant", "stages": [{"rate": 1, "duration": 2}]}, "data": {"type": "shared_prefix"}}
                   | patch, "ip.yaml")
    assert what in str(e.value) and "\n" not in str(e.value)


# ---- a pasted vllm bench serve line -------------------------------------------------------------
def test_bench_line_flags_apply_and_the_rest_are_listed() -> None:
    line = ("vllm bench serve --backend vllm --model meta-llama/Llama-3.1-8B-Instruct --dataset-name random "
            "--random-input-len 300 --random-output-len 40 --random-range-ratio 0.1 --random-prefix-len 32 "
            "--num-prompts 50 --request-rate 7 --burstiness 0.8 --seed 9 --ignore-eos --save-result "
            "--metric-percentiles 50,99 --host 127.0.0.1 --port 8000 --header a=b c=d --temperature 0")
    b = parse_vllm_bench(shlex.split(line))
    d = b.load.dataset
    assert (b.load.request_rate, b.load.burstiness, b.load.num_prompts) == (7.0, 0.8, 50)
    assert (d.dataset, d.input_len, d.output_len, d.range_ratio, d.prefix_len) == ("random", 300, 40, 0.1, 32)
    assert b.config == {"seed": 9, "model": "meta-llama/Llama-3.1-8B-Instruct"} and b.percentiles == (50.0, 99.0)
    for flag in ("--backend", "--ignore-eos", "--save-result", "--host", "--port", "--header", "--temperature"):
        assert flag in b.ignored_line()


def test_a_bench_line_with_a_trace_keeps_its_times_unless_it_sets_a_rate(tmp_path: Path) -> None:
    code, text = kvsim("simulate", str(BUNDLED), "--out", str(tmp_path / "a"), *FAST, "--",
                       "vllm", "bench", "serve", "--num-prompts", "40", "--port", "1")
    assert code == 0, text
    q = pd.read_parquet(tmp_path / "a" / "requests.parquet")
    assert np.array_equal(np.sort(q["arrival_s"].to_numpy()), load_trace(BUNDLED).df["arrival_s"].to_numpy()[:40])
    code, text = kvsim("simulate", "--out", str(tmp_path / "b"), *FAST, "--", "vllm", "bench", "serve",
                       "--num-prompts", "30", "--random-output-len", "5")
    assert code == 0, text                                  # no trace: vLLM's default random dataset, at inf
    q = pd.read_parquet(tmp_path / "b" / "requests.parquet")
    assert len(q) == 30 and (q["arrival_s"] == 0).all() and (q["prompt_tokens"] == 1024).all()


# ---- --save-result -------------------------------------------------------------------------------
def test_save_result_has_vllms_keys_and_figures_and_calibrate_check_reads_it(tmp_path: Path) -> None:
    res = tmp_path / "res.json"
    code, text = kvsim("simulate", "--out", str(tmp_path / "r"), "--model", "llama-3.1-8b", "--save-result", str(res),
                       "--", "vllm", "bench", "serve", "--dataset-name", "random", "--num-prompts", "60",
                       "--random-input-len", "400", "--random-output-len", "48", "--random-range-ratio", "0.5",
                       "--request-rate", "5", "--metric-percentiles", "90,99")
    assert code == 0, text
    d = json.loads(res.read_text())
    q = pd.read_parquet(tmp_path / "r" / "requests.parquet")
    done = q[q["status"] == "finished"]
    assert (d["completed"], d["num_prompts"], d["max_concurrency"], d["request_rate"], d["burstiness"]) == (60, 60, None, 5.0, 1.0)
    assert d["duration"] == pytest.approx(done["finish_s"].max())
    assert d["request_throughput"] == pytest.approx(60 / d["duration"])
    assert d["output_throughput"] == pytest.approx(done["output_tokens"].sum() / d["duration"])
    for name, col in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2el", "e2e_s")):
        x = done[col].dropna().to_numpy() * 1e3
        assert d[f"mean_{name}_ms"] == pytest.approx(x.mean())
        assert d[f"median_{name}_ms"] == pytest.approx(np.median(x))
        assert d[f"std_{name}_ms"] == pytest.approx(x.std())
        assert d[f"p99_{name}_ms"] == pytest.approx(np.percentile(x, 99))
        assert d[f"p90_{name}_ms"] == pytest.approx(np.percentile(x, 90))
    pooled = np.repeat(done["tpot_s"].to_numpy() * 1e3, done["output_tokens"].to_numpy() - 1)
    for stat, f in (("mean", np.mean), ("median", np.median), ("std", np.std), ("p99", lambda a: np.percentile(a, 99))):
        assert d[f"{stat}_itl_ms"] == pytest.approx(f(pooled))
    assert {"cost_model", "cost_basis", "cost_band", "itl"} <= set(d["kvsim"])
    code, text = kvsim("calibrate", "check", str(res))
    assert code == 0, text
    assert f"{d['mean_e2el_ms'] / 1e3:.3f}s" in text and f"{d['mean_ttft_ms']:.1f}ms" in text


def test_trace_gen_from_a_pasted_bench_line_and_its_refusals(tmp_path: Path) -> None:
    out = tmp_path / "b.jsonl"
    code, text = kvsim("trace", "gen", str(out), "--", "vllm", "bench", "serve", "--dataset-name", "random",
                       "--num-prompts", "25", "--random-input-len", "64", "--request-rate", "4", "--seed", "7")
    assert code == 0, text
    df = load_trace(out).df
    assert len(df) == 25 and np.allclose(df["arrival_s"], request_rate_arrivals(25, 4.0, 1.0, arrival_stream(7)))
    code, text = kvsim("trace", "gen", str(out), "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct")
    assert code == 2 and "vllm bench serve" in text and len(text.strip().splitlines()) == 1
    (tmp_path / "conv.json").write_text('[{"conversations": [{"value": "hi"}, {"value": "yo"}]}]')
    code, text = kvsim("trace", "gen", str(out), "--", "vllm", "bench", "serve", "--dataset-name", "sharegpt",
                       "--dataset-path", str(tmp_path / "conv.json"))
    assert code == 2 and "length table" in text and len(text.strip().splitlines()) == 1, text


def test_sweep_sends_the_request_rate_trace_to_every_point(tmp_path: Path) -> None:
    code, text = kvsim("sweep", str(BUNDLED), "--out", str(tmp_path / "sw"), "--set", "max_num_seqs=8,32", "-j", "1",
                       *FAST, "--request-rate", "8", "--seed", "1")
    assert code == 0, text
    rows = pd.read_parquet(tmp_path / "sw" / "sweep.parquet")
    (path,) = set(rows["trace"])
    assert Path(path).parent == tmp_path / "sw" / "workloads"
    sent = load_trace(path).df["arrival_s"].to_numpy()
    assert np.array_equal(sent, request_rate_arrivals(500, 8.0, 1.0, arrival_stream(1)))
    assert rows["offered_rps"].round(6).nunique() == 1 and rows["ttft_p99_s"].nunique() == 2
