"""A run is "fitted" only inside the regime the serving stack was fitted in (issue 48, point 6):
its GPU, TP, dense models and the batch, context and prompt ranges its stages' replays covered;
outside it the summary says what was extrapolated and by how much, with E2E and TTFT bands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from calibration.fit_regime import patch_entry
from sim.config.schema import make_config
from sim.cost.regime import Regime, check_run
from sim.cost.stack import committed_stacks
from sim.run.simulate import simulate
from workloads.schema import Trace, validate


def _trace(n: int, rate: float, prompt: tuple[int, int], out: tuple[int, int], seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    arrival = np.arange(n) / rate if rate > 0 else np.zeros(n)
    df = pd.DataFrame(dict(arrival_s=arrival, prompt_tokens=rng.integers(*prompt, n), output_tokens=rng.integers(*out, n)))
    return Trace(validate(df, "regime"), "regime", "test")


def _run(trace: Trace, model: str = "llama-2-7b", tp: int = 1, **kw: Any) -> Any:
    return simulate(make_config(model=model, gpu="h100", tensor_parallel_size=tp, **kw), trace)


@pytest.fixture(scope="module")
def regime() -> Regime:
    r = committed_stacks()["vllm-v1"].regime
    assert r is not None and r.gpus == ("h100",) and not r.moe
    return r


def test_a_run_inside_the_fitted_regime_says_fitted(regime: Regime) -> None:
    lo_p, hi_p = int(regime.prompt[0]), int(regime.prompt[1])
    out_hi = int(regime.context[1]) - hi_p
    res = _run(_trace(300, 5.0, (lo_p, hi_p), (out_hi // 2, out_hi)))
    s = res.summary
    assert s.cost_basis == "fitted" and s.cost_regime["basis"] == "fitted", s.cost_regime
    seen, edge = s.cost_regime["run_p95"], s.cost_regime["fitted_p95"]
    assert all(seen[k] <= edge[k] for k in ("batch", "context", "prompt")) and seen["batch"] > 1
    assert s.cost_regime["detail"].startswith("inside") and not s.cost_regime["outside"]
    e2e = committed_stacks()["vllm-v1"].band_e2e
    assert e2e is not None and s.cost_band_e2e == (e2e.optimistic, e2e.pessimistic)


def test_long_contexts_are_extrapolated_and_say_how_far(regime: Regime) -> None:
    long = int(regime.context[1]) * 3  # within llama-2-7b's 4,096-token context
    s = _run(_trace(60, 2.0, (long, long + 200), (50, 100))).summary
    r = s.cost_regime
    assert s.cost_basis == r["basis"] == "extrapolated"   # the GPU/TP basis alone is fitted; the run is not
    assert "this run: " in s.cost_basis_detail
    ctx = next(x for x in r["outside"] if x.startswith("context p95"))
    assert f"{r['run_p95']['context']:,.0f} vs fitted <= {regime.context[1]:,.0f}" in ctx
    assert f"({r['run_p95']['context'] / regime.context[1]:.1f}x)" in ctx and "context p95" in r["detail"]
    assert not any(x.startswith("batch") for x in r["outside"])
    # outside the regime the E2E and TTFT bands widen to the stack's extrapolated pairs
    st = committed_stacks()["vllm-v1"]
    assert st.band_e2e is not None and st.band_ttft is not None
    assert s.cost_band_e2e == (st.band_e2e.optimistic_extrapolated, st.band_e2e.pessimistic_extrapolated)
    assert s.cost_band_ttft[0] <= st.band_ttft.optimistic


def test_a_large_batch_is_extrapolated(regime: Regime) -> None:
    n = int(regime.batch[1]) * 3
    s = _run(_trace(n, 0.0, (50, 100), (400, 500)), max_num_seqs=n).summary
    r = s.cost_regime
    assert r["basis"] == "extrapolated" and r["run_p95"]["batch"] > regime.batch[1]
    assert any(x.startswith(f"batch p95 {r['run_p95']['batch']:,.0f} vs fitted <= {regime.batch[1]:,.0f}")
               for x in r["outside"]), r


def test_a_moe_run_is_extrapolated() -> None:
    s = _run(_trace(40, 2.0, (300, 400), (50, 80)), model="mixtral-8x7b", tp=2).summary
    assert s.cost_basis == "extrapolated" and s.cost_regime["basis"] == "extrapolated"
    assert "MoE model vs fitted dense models only" in s.cost_regime["outside"]


def test_summary_json_carries_e2e_and_ttft_bands(tmp_path: Path) -> None:
    res = _run(_trace(30, 2.0, (300, 400), (50, 80)))
    res.write(tmp_path)
    d = json.loads((tmp_path / "summary.json").read_text())
    st = committed_stacks()["vllm-v1"]
    assert st.band_e2e is not None and st.band_ttft is not None
    want = {"cost_band_e2e": st.band_e2e, "cost_band_ttft": st.band_ttft}
    for k, b in want.items():
        lo, hi = d[k]
        assert lo <= 0 <= hi and lo < hi and (lo, hi) in ((b.optimistic, b.pessimistic),
                                                           (b.optimistic_extrapolated, b.pessimistic_extrapolated))
    assert d["cost_regime"]["basis"] in ("fitted", "extrapolated") and d["cost_band"] == list(res.summary.cost_band)
    flat = res.summary.flat()
    assert flat["cost_band_ttft_optimistic"] == d["cost_band_ttft"][0] and flat["cost_regime_basis"]


def test_a_stack_without_a_regime_reports_none() -> None:
    s = _run(_trace(20, 2.0, (100, 200), (20, 40)), serving_stack="vllm-0.6").summary
    assert s.cost_regime == {} and s.cost_band_e2e == (0.0, 0.0)


def test_check_run_names_gpu_tp_and_each_quantity() -> None:
    r = Regime(("h100",), (1, 2), False, (4.0, 96.0), (200.0, 1900.0), (100.0, 800.0))
    q = {"batch": np.full(50, 212.0), "context": np.full(50, 12400.0), "prompt": np.full(50, 300.0)}
    c = check_run(r, q, gpu="a100", tp=4)
    assert c.outside == ("GPU a100 vs fitted h100", "TP 4 vs fitted 1, 2", "batch p95 212 vs fitted <= 96 (2.2x)",
                         "context p95 12,400 vs fitted <= 1,900 (6.5x)")
    assert check_run(r, {"prompt": q["prompt"]}, gpu="h100", tp=2).inside
    assert check_run(r, {"prompt": q["prompt"]}, moe=True).outside == ("MoE model vs fitted dense models only",)


def test_patch_entry_adds_keys_and_keeps_every_other_line() -> None:
    text = "schema: x\nstacks:\n  a:\n    coef:\n      k: 1.0\n    regime:\n      old: 1\n  b:\n    coef:\n      k: 2.0\nother: 3\n"
    new = patch_entry(text, "a", {"regime": {"p95": 5}, "band_e2e": {"optimistic": -0.1}})
    assert "old: 1" not in new and "      p95: 5\n" in new and "    band_e2e:\n      optimistic: -0.1\n" in new
    assert [ln for ln in new.splitlines() if "regime" not in ln and "p95" not in ln and "band_e2e" not in ln
            and "optimistic" not in ln] == [ln for ln in text.splitlines() if "regime" not in ln and "old" not in ln]
    assert new.index("band_e2e") < new.index("  b:")
