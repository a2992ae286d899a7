"""Synthetic generators reproduce their configured rate, burstiness and length distributions.

Tolerances are Z standard errors of the estimate for the sample drawn (never tuned to pass):
counts are Poisson (SE sqrt(E)), means use sigma/sqrt(n), the inter-arrival CV uses the delta
method, rank correlation the Fisher z-transform (var 1.06/(n-3)).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from sim.errors import ConfigError
from tests.conftest import NO_DATA, SHARED_TRACES
from workloads.gen import generate
from workloads.gen.generate import load_spec, parse_spec
from workloads.schema import validate

Z = 5.0
SHAREGPT = SHARED_TRACES / "sarathi_length_stats" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
AZURE_CONV = SHARED_TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
FIXED = {"prompt": {"kind": "fixed", "value": 100}, "output": {"kind": "fixed", "value": 10}}


def gen(seed: int = 0, **spec: object) -> pd.DataFrame:
    return generate(parse_spec({**FIXED, **spec}), np.random.default_rng(seed))


def cv_se(k: float, n: int) -> float:
    """SE of the sample CV of n Gamma(shape k) gaps, by the delta method."""
    var, mu3, mu4 = k, 2 * k, 3 * k * k + 6 * k  # central moments with scale 1
    c = 1 / np.sqrt(k)
    return float(np.sqrt(c**2 / n * ((mu4 - var**2) / (4 * var**2) - mu3 / (var * k) + var / k**2)))


def within(got: float, want: float, se: float) -> None:
    assert abs(got - want) <= Z * se, f"{got} vs {want} (+- {Z} x {se})"


def test_same_seed_same_trace_other_seed_differs() -> None:
    spec = {"duration_s": 300, "arrivals": {"kind": "gamma", "rate": 3, "cv": 2},
            "prompt": {"kind": "lognormal", "median": 300, "sigma": 1},
            "sharing": {"system_prompt": {"tokens": 64, "fraction": 0.5},
                        "multi_turn": {"fraction": 0.5, "turns": {"kind": "uniform", "low": 2, "high": 4}}},
            "n": {"values": [1, 2]}}
    a, b, c = gen(1, **spec), gen(1, **spec), gen(2, **spec)
    pd.testing.assert_frame_equal(a, b)
    assert not a["arrival_s"].equals(c["arrival_s"])
    validate(a, "gen")  # a valid normalized trace


def test_poisson_rate_and_cv() -> None:
    rate, T = 5.0, 20_000.0
    t = gen(duration_s=T, arrivals={"kind": "poisson", "rate": rate})["arrival_s"].to_numpy()
    within(len(t), rate * T, np.sqrt(rate * T))
    g = np.diff(t)
    within(g.std() / g.mean(), 1.0, cv_se(1.0, len(g)))


@pytest.mark.parametrize("cv", [0.5, 2.5])
def test_gamma_rate_and_cv(cv: float) -> None:
    n, rate = 200_000, 4.0
    t = gen(num_requests=n, arrivals={"kind": "gamma", "rate": rate, "cv": cv})["arrival_s"].to_numpy()
    g = np.diff(t)
    within(g.mean(), 1 / rate, cv / rate / np.sqrt(len(g)))
    within(g.std() / g.mean(), cv, cv_se(1 / cv**2, len(g)))


def _phase_counts(t: np.ndarray, period: float, bins: int) -> np.ndarray:
    return np.bincount((np.mod(t, period) / period * bins).astype(int), minlength=bins)


def test_sinusoid_rate_curve() -> None:
    mean, amp, period, cycles, bins = 10.0, 0.8, 600.0, 100, 12
    t = gen(duration_s=period * cycles, arrivals={"kind": "sinusoid", "mean_rate": mean,
                                                   "amplitude": amp, "period_s": period})["arrival_s"].to_numpy()
    edges = np.linspace(0, period, bins + 1)
    # integral of mean*(1 + amp*sin(2 pi x / P)) over each phase bin, times the number of cycles
    cum = mean * (edges - amp * period / (2 * np.pi) * np.cos(2 * np.pi * edges / period))
    expected = np.diff(cum) * cycles
    got = _phase_counts(t, period, bins)
    assert np.all(np.abs(got - expected) <= Z * np.sqrt(expected)), (got, expected)


def test_piecewise_step_rate_repeats() -> None:
    t = gen(duration_s=40_000, arrivals={"kind": "piecewise", "points": [[0, 2], [100, 10]],
                                        "period_s": 200})["arrival_s"].to_numpy()
    low = (np.mod(t, 200) < 100).sum()
    within(low, 2 * 100 * 200, np.sqrt(2 * 100 * 200))
    within(len(t) - low, 10 * 100 * 200, np.sqrt(10 * 100 * 200))


@pytest.mark.skipif(not AZURE_CONV.is_file(), reason=NO_DATA)
def test_rate_taken_from_a_trace_per_minute() -> None:
    src = pd.read_csv(AZURE_CONV)
    t0 = pd.to_datetime(src["TIMESTAMP"].str.slice(0, 26))
    rel = (t0 - t0.iloc[0]).dt.total_seconds().to_numpy()
    per_min = np.bincount((rel // 60).astype(int))
    cycles = 20
    t = gen(duration_s=len(per_min) * 60 * cycles,
            arrivals={"kind": "trace_rate", "path": str(AZURE_CONV)})["arrival_s"].to_numpy()
    got = np.bincount((np.mod(t, len(per_min) * 60) // 60).astype(int), minlength=len(per_min))
    expected = per_min * cycles
    assert np.all(np.abs(got - expected) <= Z * np.sqrt(np.maximum(expected, 1))), (got - expected)


def test_closed_loop_clients_rate() -> None:
    clients, think, T = 50, 10.0, 20_000.0
    df = gen(duration_s=T, arrivals={"kind": "closed_loop", "clients": clients, "think_time_s": think})
    # zero latency: each client is a Poisson process of rate 1/think from a stationary start
    within(len(df), clients / think * T, np.sqrt(clients / think * T))
    assert set(df["client_id"]) == set(range(clients))
    one = np.diff(df.loc[df["client_id"] == 0, "arrival_s"].to_numpy())
    within(one.mean(), think, think / np.sqrt(len(one)))


def test_closed_loop_latency_adds_to_the_cycle() -> None:
    df = gen(num_requests=20_000, arrivals={"kind": "closed_loop", "clients": 4, "think_time_s": 1.0,
                                            "think_cv": 0.5, "latency_s": 2.0})
    g = np.diff(df.loc[df["client_id"] == 1, "arrival_s"].to_numpy())
    within(g.mean(), 3.0, 0.5 / np.sqrt(len(g)))
    assert g.min() >= 2.0


N = 100_000
ARR = {"kind": "poisson", "rate": 100.0}


def test_lognormal_lengths() -> None:
    df = gen(num_requests=N, arrivals=ARR, prompt={"kind": "lognormal", "median": 800, "sigma": 1.0})
    lp = np.log(df["prompt_tokens"].to_numpy())
    within(lp.mean(), np.log(800), 1.0 / np.sqrt(N))
    within(lp.std(), 1.0, 1.0 / np.sqrt(2 * N))


def test_uniform_and_fixed_lengths() -> None:
    lo, hi = 50, 400
    df = gen(num_requests=N, arrivals=ARR, output={"kind": "uniform", "low": lo, "high": hi})
    o = df["output_tokens"].to_numpy()
    assert o.min() == lo and o.max() == hi
    within(o.mean(), (lo + hi) / 2, np.sqrt(((hi - lo + 1) ** 2 - 1) / 12 / N))
    assert (df["prompt_tokens"] == 100).all()


def test_zipf_lengths() -> None:
    a, lo, hi = 1.2, 1, 1000
    o = gen(num_requests=N, arrivals=ARR, output={"kind": "zipf", "a": a, "min": lo, "max": hi})["output_tokens"]
    k = np.arange(lo, hi + 1)
    pmf = k**-a / (k**-a).sum()
    freq = np.bincount(o.to_numpy(), minlength=hi + 1)[lo:]
    for i in range(5):  # the head of the distribution, binomial SE
        within(freq[i] / N, pmf[i], np.sqrt(pmf[i] * (1 - pmf[i]) / N))
    within(o.mean(), (k * pmf).sum(), np.sqrt((k**2 * pmf).sum() - (k * pmf).sum() ** 2) / np.sqrt(N))


@pytest.mark.skipif(not SHAREGPT.is_file(), reason=NO_DATA)
def test_empirical_lengths_from_a_trace() -> None:
    src = pd.read_csv(SHAREGPT)["num_prefill_tokens"].to_numpy()
    p = gen(num_requests=N, arrivals=ARR, prompt={"kind": "empirical", "path": str(SHAREGPT)})["prompt_tokens"]
    assert set(p) <= set(src)
    within(p.mean(), src.mean(), src.std() / np.sqrt(N))
    for q in (1000, 5000):  # the CDF at a few points, binomial SE
        f = (src <= q).mean()
        within((p <= q).mean(), f, np.sqrt(f * (1 - f) / N))


def test_correlated_lengths_follow_the_copula() -> None:
    rho = 0.6
    df = gen(num_requests=N, arrivals=ARR, correlation=rho,
             prompt={"kind": "lognormal", "median": 1000, "sigma": 0.8},
             output={"kind": "lognormal", "median": 200, "sigma": 0.8})
    rs = spearmanr(df["prompt_tokens"], df["output_tokens"]).statistic
    want = 6 / np.pi * np.arcsin(rho / 2)  # Spearman's rho of a Gaussian copula
    within(np.arctanh(rs), np.arctanh(want), np.sqrt(1.06 / (N - 3)))


def test_lengths_clipped_to_max_model_len() -> None:
    cap = 4096
    df = gen(num_requests=N, arrivals=ARR, max_model_len=cap,
             prompt={"kind": "lognormal", "median": 1000, "sigma": 0.8},
             output={"kind": "lognormal", "median": 200, "sigma": 0.8})
    total = df["prompt_tokens"] + df["output_tokens"]
    assert total.max() == cap and df["prompt_tokens"].max() == cap - 1
    assert df["output_tokens"].min() >= 1


def test_system_prompt_shared_by_fraction() -> None:
    frac, sys_tokens, block = 0.3, 100, 16
    df = gen(num_requests=N, arrivals=ARR, sharing={"block_size": block,
                                                     "system_prompt": {"tokens": sys_tokens, "fraction": frac}})
    shared = df["prompt_tokens"] == 100 + sys_tokens
    within(shared.mean(), frac, np.sqrt(frac * (1 - frac) / N))
    assert (df["hash_ids"].map(len) == -(-df["prompt_tokens"] // block)).all()
    sys_ids = list(range(sys_tokens // block))
    assert all(h[: len(sys_ids)] == sys_ids for h in df.loc[shared, "hash_ids"])
    assert not any(set(h) & set(sys_ids) for h in df.loc[~shared, "hash_ids"])


def test_multi_turn_extends_previous_prompt_and_answer() -> None:
    block = 16
    df = gen(num_requests=5000, arrivals={"kind": "poisson", "rate": 1.0},
             prompt={"kind": "uniform", "low": 20, "high": 200}, output={"kind": "uniform", "low": 5, "high": 60},
             sharing={"block_size": block, "multi_turn": {"fraction": 1.0, "turns": {"kind": "fixed", "value": 3},
                                                           "think_time_s": 5.0}})
    checked = 0
    for _, conv in df.groupby("session_id"):
        conv = conv.sort_values("turn")
        rows = conv.to_dict("records")
        for prev, cur in itertools.pairwise(rows):
            assert cur["turn"] == prev["turn"] + 1 and cur["arrival_s"] >= prev["arrival_s"]
            assert 20 <= cur["prompt_tokens"] - prev["prompt_tokens"] - prev["output_tokens"] <= 200
            keep = prev["prompt_tokens"] // block
            assert cur["hash_ids"][:keep] == prev["hash_ids"][:keep]
            assert not set(cur["hash_ids"][keep:]) & set(prev["hash_ids"])
            checked += 1
    assert checked > 3000


def test_n_and_beam_width_per_request() -> None:
    df = gen(num_requests=N, arrivals=ARR, n={"values": [1, 2, 4], "weights": [0.7, 0.2, 0.1]}, beam_width=3)
    for v, p in ((1, 0.7), (2, 0.2), (4, 0.1)):
        within((df["n"] == v).mean(), p, np.sqrt(p * (1 - p) / N))
    assert (df["beam_width"] == 3).all()


@pytest.mark.parametrize(("yaml_text", "needle"), [
    ("duration_s: 10\narrivals: {kind: poisson, rate: -1}\nprompt: {kind: fixed, value: 1}\n"
     "output: {kind: fixed, value: 1}\n", "arrivals.poisson.rate"),
    ("duration_s: 10\narrivals: {kind: nope}\nprompt: {kind: fixed, value: 1}\noutput: {kind: fixed, value: 1}\n",
     "arrivals"),
    ("arrivals: {kind: poisson, rate: 1}\nprompt: {kind: fixed, value: 1}\noutput: {kind: fixed, value: 1}\n",
     "num_requests or duration_s"),
    ("duration_s: 10\narrivals: {kind: poisson, rate: 1}\nprompt: {kind: fixed, value: 1}\n"
     "output: {kind: fixed, value: 1}\ntypo: 3\n", "typo"),
    ("duration_s: [\n", "invalid YAML"),
])
def test_bad_spec_is_one_line_config_error(tmp_path: Path, yaml_text: str, needle: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(yaml_text)
    with pytest.raises(ConfigError) as ei:
        load_spec(p)
    assert needle in str(ei.value) and str(p) in str(ei.value) and "\n" not in str(ei.value)
