"""``kvsim plan --disagg`` per role: a GPU per role (``1P3D:h200x2/h100x1``) with its own price,
KV pool and step times; llm-d's PD threshold (``--pd-threshold``); early-stopped P/D probes
(``run_cluster(stop_on_fail=...)``); the unit named in the table and the band sentence."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim.cli.simulate import bundled_trace
from sim.cluster.disagg import run_cluster
from sim.cluster.slo import Slo, SloTarget, evaluate
from sim.cluster.spec import parse_cluster
from sim.errors import ConfigError
from sim.fleet.band import band_sentence
from sim.fleet.breakdown import ttft_parts
from sim.fleet.candidate import Candidate, Split, grid
from sim.fleet.capacity import CapacityEstimate, SearchSpec
from sim.fleet.planner import PlanSpec, best_per_shape
from sim.fleet.prices import GpuPrice, load_prices
from sim.fleet.xpyd_plan import cluster, parse_splits, probe_split, run_split
from sim.run.static import static_parts
from tests.conftest import make_trace

BASE = {"model": "llama-3.1-8b", "cost_model": "roofline", "max_model_len": 4096}
runner = CliRunner()
cli_main._load()


def _df(prompts: list[int], out: int = 8, gap: float = 0.5) -> pd.DataFrame:
    return make_trace([{"arrival_s": gap * i, "prompt_tokens": p, "output_tokens": out}
                       for i, p in enumerate(prompts)]).df


def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(cli_main.app, ["plan", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


# ---- the --disagg text with a GPU per role ----------------------------------------------------------

def test_a_role_is_a_tp_a_gpu_or_gpu_x_tp() -> None:
    s = parse_splits("1P3D:h200x2/h100x1", ["kv-aware"])[0]
    assert s.prefill_kw == (("gpu", "h200"), ("tensor_parallel_size", 2))
    assert s.decode_kw == (("gpu", "h100"), ("tensor_parallel_size", 1))
    gpus_only = parse_splits("1P3D:H200/h100", ["kv-aware"])[0]                 # case-insensitive, TP as the grid's
    assert gpus_only.prefill_kw == (("gpu", "h200"),) and gpus_only.decode_kw == (("gpu", "h100"),)
    amd = parse_splits("1P1D:mi300xx2/mi300x", ["kv-aware"])[0]                 # the GPU's own x stays in its name
    assert amd.prefill_kw == (("gpu", "mi300x"), ("tensor_parallel_size", 2)) and amd.decode_kw == (("gpu", "mi300x"),)
    assert parse_splits("1P3D:2/1", ["kv-aware"])[0].prefill_kw == (("tensor_parallel_size", 2),)   # as before


def test_grid_a_split_that_pins_both_gpus_is_one_candidate_per_tp_named_by_both() -> None:
    s = parse_splits("1P3D:h200x2/h100", ["kv-aware"])[0]
    cands = [c for c in grid(["h100", "l40s"], [1, 2], {}, [s]) if c.split is not None]
    # both GPUs pinned: not once per --gpu; decode TP unpinned: once per --tp; gpu/tp = the decode role's
    assert [(c.gpu, c.tp, c.shape) for c in cands] == [("h100", 1, "1P3D (h200 TP2 / h100 TP1)"),
                                                       ("h100", 2, "1P3D (h200 TP2 / h100 TP2)")]
    assert [c.gpus_per_unit for c in cands] == [1 * 2 + 3 * 1, 1 * 2 + 3 * 2]
    assert cands[0].gpu_names == ("h200", "h100")
    one = parse_splits("1P1D:a100-80gb/1", ["kv-aware"])[0]                    # prefill GPU only: per --gpu
    assert [c.shape for c in grid(["h100", "l40s"], [1], {}, [one]) if c.split] == [
        "1P1D (a100-80gb TP1 / h100 TP1)", "1P1D (a100-80gb TP1 / l40s TP1)"]


@pytest.mark.parametrize("text, msg", [
    ("1P1D:h300/h100", "--disagg '1P1D:h300/h100': '1P1D:h300/h100': prefill 'h300': expected a TP (2), a catalog "
                       "GPU (h200) or GPUxTP (h200x2); catalog: a100-40gb"),
    ("1P1D:h100/h100x", "decode 'h100x': expected a TP (2)"),
    ("1P1D:h100x0/1", "TP >= 1"),
])
def test_a_bad_role_is_a_one_line_config_error(text: str, msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_splits(text, ["kv-aware"])
    assert msg in str(e.value) and "\n" not in str(e.value)


# ---- each role's price, KV pool and step times --------------------------------------------------------

def test_a_unit_costs_each_roles_gpus_at_its_own_price() -> None:
    prices = {"h200": GpuPrice("h200", 4.0, 4.0, 4.0, "test", False),
              "h100": GpuPrice("h100", 2.0, 2.0, 2.0, "test", False)}
    c = Candidate("h100", 1, (), parse_splits("1P3D:h200x2/h100x1", ["kv-aware"])[0])
    assert c.role_gpus() == [("h200", 2), ("h100", 3)]
    assert c.unit_price(prices) == 2 * 4.0 + 3 * 2.0          # $14/h for 5 GPUs
    assert Candidate("h100", 2).unit_price(prices) == 4.0


def test_the_split_validated_per_gpu_x_tp_is_the_best_per_dollar_not_per_gpu() -> None:
    prices = {"h200": GpuPrice("h200", 4.0, 4.0, 4.0, "test", False),
              "h100": GpuPrice("h100", 2.0, 2.0, 2.0, "test", False)}
    mixed = Candidate("h100", 1, (), Split(1, 1, prefill_kw=(("gpu", "h200"),)))      # 2 GPUs, $6/h
    plain = Candidate("h100", 1, (), Split(1, 1))                                     # 2 GPUs, $4/h
    caps = [CapacityEstimate(c, q, q, q, [], {}, "none", {}) for c, q in ((mixed, 10.0), (plain, 9.5))]
    spec = PlanSpec(gpus=["h100"], tps=[1], slo=Slo((SloTarget("ttft", 0.9, 1.0),), None), base=BASE,
                    prices=prices)
    assert [c.candidate for c in best_per_shape(caps)] == [mixed]           # 5 QPS per GPU against 4.75
    assert [c.candidate for c in best_per_shape(caps, spec)] == [plain]     # 2.375 QPS per $/h against 1.67


def test_each_role_builds_on_its_own_gpu_with_the_same_block_size() -> None:
    s = Split(1, 1, "round-robin", prefill_kw=(("gpu", "h200"),), decode_kw=(("gpu", "h100"),))
    c = Candidate("h100", 1, (("block_size", 32),), s)
    spec = parse_cluster(cluster(c, BASE), "test")
    assert [(i.role, i.config.gpu, i.config.block_size) for i in spec.instances] == [
        ("prefill", "h200", 32), ("decode", "h100", 32)]
    pool = {r: static_parts(c.config(BASE, r))[1].pool_slots for r in ("prefill", "decode")}
    assert pool["prefill"] > 1.5 * pool["decode"]             # 141 GB of HBM against 80 GB, same weights


def test_a_slower_prefill_gpu_slows_only_the_prefill_part_of_ttft() -> None:
    df = _df([2000])
    parts = {}
    for gpu in ("h100", "a100-80gb"):
        split = Split(1, 1, "round-robin", prefill_kw=(("gpu", gpu),), decode_kw=(("gpu", "h100"),))
        parts[gpu] = ttft_parts(run_split(Candidate("h100", 1, (), split), BASE, df).requests).iloc[0]
    assert parts["a100-80gb"]["ttft_prefill_s"] > 1.3 * parts["h100"]["ttft_prefill_s"]   # roofline: ~1/3 the FLOPs
    for p in ("ttft_transfer_s", "ttft_first_decode_s", "ttft_queue_s", "ttft_api_server_s"):
        assert parts["a100-80gb"][p] == pytest.approx(parts["h100"][p], rel=1e-12), p    # same link, same decode GPU


# ---- llm-d's PD threshold ------------------------------------------------------------------------------

def test_pd_threshold_sends_short_uncached_prompts_to_prefill_on_their_decode_instance() -> None:
    df = _df([100, 1000, 120, 2000])
    for threshold, local in ((0, [False] * 4), (500, [True, False, True, False])):
        s = parse_splits("1P1D", ["round-robin"], threshold=threshold)[0]
        assert s.threshold == threshold
        req = run_split(Candidate("h100", 1, (), s), BASE, df).requests
        assert list(req["prefill_instance"] < 0) == local, threshold
    with pytest.raises(ConfigError, match="--pd-threshold -1: must be >= 0"):
        parse_splits("1P1D", ["kv-aware"], threshold=-1)


# ---- early stop of P/D runs ------------------------------------------------------------------------------

def _pd_cluster() -> dict:
    return {"defaults": {"model": "llama-3.1-8b", "gpu": "h100", "cost_model": "constant:0.1", "max_model_len": 2048},
            "instances": [{"name": "p", "role": "prefill"}, {"name": "d", "role": "decode"}],
            "links": {"default": {"kind": "rdma-ndr"}}}


def test_a_hopeless_pd_run_stops_early_with_the_full_runs_verdict() -> None:
    # every step takes 0.1 s: a prompt's prefill alone misses a 0.05 s TTFT, so 90% can never be met
    trace = make_trace([{"arrival_s": 0.02 * i, "prompt_tokens": 200, "output_tokens": 20} for i in range(200)])
    slo = Slo((SloTarget("ttft", 0.9, 0.05),), None)
    full = run_cluster(parse_cluster(_pd_cluster()), trace)
    stopped = run_cluster(parse_cluster(_pd_cluster()), trace, stop_on_fail=(slo, 20))
    assert not full.aborted and stopped.aborted and stopped.failing == ("ttft_p90<=0.05s",)
    assert stopped.end_s < full.end_s / 4 and len(stopped.steps) < len(full.steps) / 4
    assert evaluate(full.requests.iloc[20:], slo).passed == evaluate(stopped.requests.iloc[20:], slo).passed is False


def test_a_pd_run_that_passes_is_never_stopped_and_unchanged() -> None:
    trace = make_trace([{"arrival_s": 0.5 * i, "prompt_tokens": 200, "output_tokens": 10} for i in range(40)])
    slo = Slo((SloTarget("ttft", 0.9, 5.0),), None)
    full = run_cluster(parse_cluster(_pd_cluster()), trace)
    watched = run_cluster(parse_cluster(_pd_cluster()), trace, stop_on_fail=(slo, 4))
    assert not watched.aborted
    pd.testing.assert_frame_equal(full.requests, watched.requests)
    pd.testing.assert_frame_equal(full.steps, watched.steps)


def test_a_hopeless_xpyd_probe_is_stopped_early_and_fails() -> None:
    base = {**BASE, "cost_model": "constant:0.1", "max_model_len": 2048}
    spec = SearchSpec(Slo((SloTarget("ttft", 0.9, 0.05),), None), base, 1.0, 0.1, 100.0)
    window = _df([200] * 200, out=20, gap=0.02)
    probe, _, diag = probe_split(Candidate("h100", 1, (), Split(1, 1, "round-robin")), spec, window, 50.0)
    assert probe.stopped_early and not probe.passed
    assert diag.failing == ("ttft_p90<=0.05s",)


# ---- the unit in the table and the band sentence ---------------------------------------------------------

def test_band_sentence_names_xpyd_groups_and_counts_their_gpus() -> None:
    row = pd.Series({"gpu": "h100", "tp": 1, "shape": "1P3D", "gpus_per_unit": 4, "replicas": 2,
                     "replicas_pessimistic": 3, "band_pessimistic_pct": 20.0, "qps_pessimistic": 1.5,
                     "cost_per_hour_pessimistic": 35.4, "cost_basis": "fitted"})
    text = band_sentence(row)
    assert "one xPyD group sustains 1.5 QPS" in text and "**3 xPyD groups (12 GPUs, $35.40/h)" in text
    held = row.copy()
    held["replicas_pessimistic"] = 2
    assert "**2 xPyD groups either way**" in band_sentence(held)


def test_cli_mixed_gpus_price_each_role_and_name_both(tmp_path: Path) -> None:
    head = tmp_path / "head.csv"
    head.write_text("\n".join(bundled_trace().read_text().splitlines()[:121]) + "\n")
    out = tmp_path / "plan"
    code, text = kvsim(str(head), "--gpu", "h100", "--tp", "1", "--slo-ttft-p90", "2", "--slo-tpot-p90", "0.2",
                       "--seeds", "1", "--window", "120", "--search-iters", "1", "--workers", "1", "--no-band",
                       "--cost-model", "roofline", "--disagg", "1P1D:h200/a100-80gb", "--router", "round-robin",
                       "--pd-threshold", "64", "--out", str(out))
    assert code == 0, text
    assert "QPS/unit" in text and "QPS/replica" not in text
    t = pd.read_csv(out / "plan.csv")
    x = t[t["shape"] == "1P1D (h200 TP1 / a100-80gb TP1)"].iloc[0]   # the first of its tuned knob settings
    cat = load_prices(None)
    unit = cat["h200"].typical + cat["a100-80gb"].typical
    assert x["gpu"] == "a100-80gb" and x["gpus_per_unit"] == 2
    assert x["price_per_gpu_hour"] == pytest.approx(unit / 2)
    assert x["cost_per_hour"] == pytest.approx(x["replicas"] * unit)
    md = (out / "plan.md").read_text()
    assert "1P1D (h200 TP1 / a100-80gb TP1)" in md and "| QPS/unit |" in md and "| units |" in md
    inputs = yaml.safe_load((out / "inputs.yaml").read_text())
    assert set(inputs["prices"]) == {"h100", "h200", "a100-80gb"} and inputs["disagg"]["pd_threshold"] == 64


@pytest.mark.parametrize("args, msg", [
    (("--disagg", "1P1D:h300/h100"), "--disagg '1P1D:h300/h100': '1P1D:h300/h100': prefill 'h300'"),
    (("--pd-threshold", "64"), "--pd-threshold needs --disagg"),
    (("--disagg", "1P1D", "--pd-threshold", "-5"), "--pd-threshold -5: must be >= 0"),
])
def test_bad_role_and_threshold_flags_are_one_line_errors(args: tuple[str, ...], msg: str) -> None:
    code, text = kvsim(str(bundled_trace()), "--slo-ttft-p99", "1", *args)
    assert code == 2, text
    assert msg in text and "\n" not in text.strip()
