"""End-to-end fit (issue 16): measured serving stages replayed through the simulator itself."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from calibration.public_rows import PUBLIC
from calibration.replay import replay, stage_trace
from calibration.serving_runs import read_results
from calibration.static_bench import bench_rows, predict_static, simulate_row
from calibration.v1_fit import fit_v1
from sim.cli.calibrate import app
from sim.cost.stack import committed_stacks
from sim.errors import ConfigError

RUNS = PUBLIC / "vllm-0.15.1-h100"


@pytest.fixture(scope="module")
def stages():  # type: ignore[no-untyped-def]
    return read_results(RUNS)


def test_the_shipped_runs_read_as_stages_and_two_were_overloaded(stages) -> None:  # type: ignore[no-untyped-def]
    assert len(stages) == 12 and {s.model for s in stages} == {"llama-2-7b", "codellama-34b"}
    over = sorted(s.run for s in stages if s.overloaded)
    assert len(over) == 2 and all("reasoning" in r for r in over)
    s = stages[0]
    assert s.engine == {"max_num_batched_tokens": 2048, "max_num_seqs": 128, "max_model_len": 4096}
    # under ignore_eos the engine generates max_tokens; the measured quantiles count re-tokenized text
    assert s.output_tokens() == 247 and s.output_tokens("measured") < 247


def test_the_replayed_trace_follows_the_stage(stages) -> None:  # type: ignore[no-untyped-def]
    s = stages[0]
    t = stage_trace(s, np.random.default_rng(0), window_s=20)
    df = t.df
    assert len(df) == 100 and np.allclose(np.diff(df["arrival_s"]), 1 / s.rate)   # constant load at 5 req/s
    assert df["prompt_tokens"].between(580, 604).all() and (df["output_tokens"] == 247).all()
    shared = {tuple(h[:6]) for h in df["hash_ids"]}
    assert len(shared) <= s.groups                                                  # 10 system prompts
    again = stage_trace(s, np.random.default_rng(0), window_s=20).df
    assert df["prompt_tokens"].tolist() == again["prompt_tokens"].tolist()         # seeded


def test_the_benchmark_s_finite_prompt_set_is_sent_in_a_cycle(stages) -> None:  # type: ignore[no-untyped-def]
    """inference-perf made groups x prompts_per_group prompts once and sent them again and again:
    a repeat is the same prompt (length and blocks), so vLLM's prefix cache served it whole."""
    s = next(x for x in stages if x.model == "codellama-34b" and x.rate == 5.0)
    assert (s.groups, s.prompts_per_group) == (10, 10)
    df = stage_trace(s, np.random.default_rng(0), window_s=60).df
    k = s.groups * s.prompts_per_group
    ids = [tuple(h) for h in df["hash_ids"]]
    assert len(set(ids)) == k and all(ids[i] == ids[i + k] for i in range(len(ids) - k))
    assert df["prompt_tokens"].iloc[:k].tolist() == df["prompt_tokens"].iloc[k:2 * k].tolist()
    assert len({i[:6] for i in ids}) == s.groups                                     # 6 blocks of system prompt
    from dataclasses import replace
    unique = stage_trace(replace(s, prompts_per_group=0), np.random.default_rng(0), window_s=60).df
    assert len({tuple(h) for h in unique["hash_ids"]}) == len(unique)               # the old reading: all unique


def test_a_cycled_prompt_set_is_served_from_the_prefix_cache(stages) -> None:  # type: ignore[no-untyped-def]
    s = next(x for x in stages if x.model == "codellama-34b" and x.rate == 5.0)
    from dataclasses import replace
    cyc, uniq = replay(s, "vllm-v1", window_s=40), replay(replace(s, prompts_per_group=0), "vllm-v1", window_s=40)
    assert cyc.ttft_mean < uniq.ttft_mean                                            # no prefill to compute
    assert cyc.ttft_mean > 0.5 * s.ttft_mean                                         # but a step, and the API server


def test_the_committed_v1_stack_reproduces_a_measured_stage(stages) -> None:  # type: ignore[no-untyped-def]
    s = stages[0]
    r = replay(s, "vllm-v1", window_s=30)
    assert abs(r.e2e_mean / s.e2e_mean - 1) < 0.10 and abs(r.ttft_mean / s.ttft_mean - 1) < 0.25
    assert not r.overloaded


def test_the_overloaded_run_is_predicted_overloaded(stages) -> None:  # type: ignore[no-untyped-def]
    s = next(x for x in stages if x.overloaded and x.model == "llama-2-7b")
    r = replay(s, "vllm-v1", window_s=120)
    assert r.overloaded


def test_fit_on_a_tiny_subset_is_deterministic_and_moves_toward_the_measurement(stages) -> None:  # type: ignore[no-untyped-def]
    sub = [stages[0]]
    a, b = fit_v1(sub, window_s=15, iters=2), fit_v1(sub, window_s=15, iters=2)
    assert np.array_equal(a.theta, b.theta)
    r = a.results[0]
    assert abs(r.e2e_mean / sub[0].e2e_mean - 1) < 0.15


def test_static_batch_time_is_linear_in_the_stack(tmp_path: Path) -> None:
    rows = bench_rows()
    assert {"prefill-bound", "decode, B = 1", "decode, B >= 16", "TP > 1"} == set(rows["regime"])
    assert rows[rows["heldout"]]["prompt"].isin([256, 1024]).all() or rows[rows["heldout"]]["moe"].any()
    r = rows[(rows["model"] == "llama-2-7b") & (rows["gpu"] == "h100") & (rows["batch"] == 16)
             & (rows["prompt"] == 256) & (rows["tp"] == 1)].iloc[0]
    got = simulate_row(r, "vllm-0.6")
    assert got is not None
    feats, sim = got
    st = committed_stacks()["vllm-0.6"]
    theta = np.array([st.eta[0][1], st.eta_tok, st.eta_attn, st.cpu_s[0][1], 0, 0, st.per_seq_s, st.prefill_s])
    import pandas as pd
    d = pd.DataFrame([{**r.to_dict(), **dict(zip(("kernel_fixed", "kernel_dense", "kernel_attention", "step", "seq",
                                                  "prefill", "floor"), feats, strict=True))}])
    assert predict_static(d, theta)[0] == pytest.approx(sim, rel=1e-6)


def test_calibrate_check_reads_a_vllm_bench_serve_result(tmp_path: Path) -> None:
    res = {"num_prompts": 40, "completed": 40, "duration": 10.0, "request_rate": 4.0, "request_throughput": 4.0,
           "total_input_tokens": 40 * 500, "total_output_tokens": 40 * 100, "mean_ttft_ms": 30.0,
           "mean_tpot_ms": 8.0, "mean_e2el_ms": 830.0}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(res))
    out = CliRunner().invoke(app, ["check", str(p), "--model", "llama-2-7b", "--window-s", "10"])
    assert out.exit_code == 0, out.output
    assert "bench#0" in out.output and "no/" in out.output
    bad = CliRunner().invoke(app, ["check", str(p)])
    assert isinstance(bad.exception, ConfigError) and "--model" in str(bad.exception)
    with pytest.raises(ConfigError, match=r"not experiments\.json"):
        (tmp_path / "x.json").write_text("{}")
        read_results(tmp_path / "x.json", model="llama-2-7b")


def test_the_source_left_out_check_uses_nothing_fitted_on_the_source() -> None:
    """The no-fit stack (the leave-one-source-out check) keeps the kernel tables at multiplier 1
    and drops every stack overhead; the committed fit records its replay of every stage."""
    import yaml

    from calibration.era_fit import no_fit
    from calibration.era_report import v1_tables
    from sim.cost.stack import STACKS_PATH

    v1 = yaml.safe_load(STACKS_PATH.read_text())["stacks"]["vllm-v1"]
    bare = no_fit(v1)
    assert all(bare["coef"][k] == 1.0 for k in ("eta_tok", "eta_attn"))
    assert all(bare["coef"][k] == 0.0 for k in ("per_seq_s", "prefill_s", "prefill_n2_s"))
    assert all(t["eta"] == 1.0 and t["cpu_s"] == 0.0 for t in bare["by_tp"].values())
    assert v1["by_tp"] != bare["by_tp"] or v1["coef"] != bare["coef"]                # the fitted one differs
    rows = v1["stages"]
    assert rows and all(r["e2e_nofit_s"] > 0 and r["ttft_nofit_s"] > 0 for r in rows)
    line = next(x for x in v1_tables(v1) if x.startswith("Leave the source out"))
    from statistics import median
    med = median(abs(r["e2e_nofit_s"] / r["e2e_measured_s"] - 1) for r in rows)
    assert f"E2E {100 * med:.1f}%" in line


def test_an_extrapolated_band_reaches_the_cross_source_error_and_never_narrows() -> None:
    from calibration.cross_band import widen

    b = {"optimistic": -0.03, "pessimistic": 0.03, "optimistic_extrapolated": -0.05, "pessimistic_extrapolated": 0.05,
         "basis": "held out"}
    w = widen(b, np.array([0.14, 0.25, 0.12]), "rows")
    assert (w["optimistic"], w["pessimistic"]) == (-0.03, 0.03)                       # inside the fit: unchanged
    assert w["optimistic_extrapolated"] == -0.05 and w["pessimistic_extrapolated"] == 0.25
    assert "rows (n=3" in w["basis"] and widen(b, np.array([]), "rows") == b
    assert widen(b, np.array([-0.5, 0.01]), "x")["optimistic_extrapolated"] == -0.5


def test_the_committed_v1_bands_cover_the_prefill_bound_cross_check() -> None:
    import yaml

    from sim.cost.stack import STACKS_PATH

    v1 = yaml.safe_load(STACKS_PATH.read_text())["stacks"]["vllm-v1"]
    for k in ("band", "band_e2e", "band_ttft"):
        assert "prefill-bound" in v1[k]["basis"] and v1[k]["pessimistic_extrapolated"] >= 0.13
