"""``kvsim plan --disagg``: xPyD groups searched beside unified replicas (sim/fleet/xpyd_plan.py),
their TTFT breakdown (sim/fleet/breakdown.py), the P/D binding labels, plan.md's section."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim.cli.simulate import bundled_trace
from sim.cluster.links import link_kind
from sim.cluster.slo import Slo, SloTarget
from sim.errors import ConfigError
from sim.fleet.binding import LABELS, PD_BINDINGS, Diagnostics, classify
from sim.fleet.breakdown import PARTS, ttft_parts
from sim.fleet.candidate import Candidate, Split, grid
from sim.fleet.disagg_report import disagg_section
from sim.fleet.planner import Plan, PlanSpec, run_plan
from sim.fleet.prices import load_prices
from sim.fleet.xpyd_plan import parse_splits, run_split, split_routers
from tests.conftest import make_trace

BASE = {"model": "llama-3.1-8b", "cost_model": "roofline", "max_model_len": 4096}
runner = CliRunner()
cli_main._load()


def _trace(n: int, gap: float, prompt: int, out: int) -> pd.DataFrame:
    rows = [{"arrival_s": gap * i, "prompt_tokens": prompt + 8 * (i % 5), "output_tokens": out + i % 7}
            for i in range(n)]
    return make_trace(rows).df


def _plan(df: pd.DataFrame, splits: list[Split], ttft: float, tpot: float, *, base: dict | None = None,
          validate: bool = False) -> Plan:
    spec = PlanSpec(gpus=["h100"], tps=[1], slo=Slo((SloTarget("ttft", 0.9, ttft), SloTarget("tpot", 0.9, tpot)), None),
                    base=base or BASE, prices=load_prices(None), replications=1, window=len(df), iters=2,
                    validate=validate, splits=splits)
    return run_plan(df, spec, band=False)


# ---- the grid and the --disagg text ---------------------------------------------------------------

def test_grid_has_a_unified_and_an_xpyd_candidate_per_shape() -> None:
    s = Split(1, 3, "kv-aware")
    cands = grid(["h100"], [1, 2], {}, [s])
    assert [(c.tp, c.shape) for c in cands] == [(1, "unified"), (1, "1P3D"), (2, "unified"), (2, "1P3D")]
    assert [c.gpus_per_unit for c in cands] == [1, 4, 2, 8]
    per_role = parse_splits("1P3D:2/1", ["kv-aware"])[0]
    cands = grid(["h100"], [1, 2], {}, [per_role])      # TP per role: once per GPU, tp = the decode TP
    assert [(c.tp, c.shape, c.gpus_per_unit) for c in cands] == [(1, "unified", 1), (1, "1P3D (TP 2/1)", 5),
                                                                 (2, "unified", 2)]


def test_disagg_text_and_router_lists() -> None:
    assert [(s.prefill, s.decode) for s in parse_splits("3", ["kv-aware"])] == [(1, 2), (2, 1)]
    two = parse_splits("1P1D", split_routers("round-robin,kv-aware:prefix=3,queue=2"))
    assert [s.router for s in two] == ["round-robin", "kv-aware:prefix=3,queue=2"]
    assert parse_splits("1P1D,1P1D", ["kv-aware"]) == parse_splits("1P1D", ["kv-aware"])  # duplicates once


@pytest.mark.parametrize("text, msg", [
    ("1", "--disagg '1': '1': an xPyD split needs at least 2 instances"),
    ("0P2D", "needs >= 1 prefill and >= 1 decode instance"),
    ("1P1D:0/1", "TP >= 1"),
    ("2x2", "expected xPyD (e.g. 1P3D)"),
])
def test_bad_disagg_text_is_a_one_line_config_error(text: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=None) as e:
        parse_splits(text, ["kv-aware"])
    assert msg in str(e.value) and "\n" not in str(e.value)


# ---- the breakdown ----------------------------------------------------------------------------------

def test_one_request_through_1p1d_ttft_is_prefill_plus_transfer_plus_first_decode() -> None:
    df = make_trace([{"arrival_s": 0.0, "prompt_tokens": 1000, "output_tokens": 8}]).df
    res = run_split(Candidate("h100", 1, (), Split(1, 1, "round-robin", "rdma-ndr")), BASE, df)
    parts = ttft_parts(res.requests).iloc[0]
    ndr = link_kind("rdma-ndr")
    # 63 blocks of 16 tokens x 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes = 2 MiB each
    assert parts["ttft_transfer_s"] == pytest.approx(ndr.latency_us * 1e-6 + 63 * 2 ** 21 / (ndr.bandwidth_gbps * 1e9))
    assert parts["ttft_queue_s"] == 0.0 and parts["ttft_kv_wait_s"] == 0.0    # idle instances, a free pool
    assert parts["ttft_prefill_s"] > 0 and parts["ttft_first_decode_s"] > 0
    assert parts.sum() == pytest.approx(res.requests["ttft_s"].iloc[0], rel=1e-12)


def test_search_measures_unified_and_xpyd_with_breakdowns_that_sum_to_ttft() -> None:
    df = _trace(80, 0.05, 700, 24)
    plan = _plan(df, [Split(1, 1, "kv-aware")], 2.0, 0.2, validate=True)
    t = plan.table.set_index("shape")
    assert set(t.index) == {"unified", "1P1D"}
    assert (t["max_qps_per_replica"] > 0).all() and t["validated"].all()   # both searched and replayed
    for shape, r in t.iterrows():
        parts = sum(r[f"ttft_{p}"] for p in PARTS)
        assert parts == pytest.approx(r["ttft_mean"], rel=1e-9), shape   # mean parts sum to the mean TTFT
        assert r["requests_per_gpu_dollar"] == pytest.approx(
            r["max_qps_per_replica"] * 3600 / (r["gpus_per_unit"] * r["price_per_gpu_hour"]))
        assert r["gpus"] == r["replicas"] * r["gpus_per_unit"]
    u, x = t.loc["unified"], t.loc["1P1D"]
    assert u["ttft_transfer"] == u["ttft_kv_wait"] == u["ttft_first_decode"] == 0.0
    assert 0 < u["busy_unified"] <= 1 and math.isnan(u["busy_prefill"]) and math.isnan(u["link_util"])
    assert x["gpus_per_unit"] == 2 and x["router"] == "kv-aware"
    assert x["ttft_transfer"] > 0 and x["ttft_first_decode"] > 0
    assert 0 < x["busy_prefill"] <= 1 and 0 < x["busy_decode"] <= 1 and 0 < x["link_util"] <= 1
    assert math.isnan(x["busy_unified"])
    text = "\n".join(disagg_section(plan))
    assert "## Disaggregation: where xPyD wins and where it does not" in text
    assert "**h100 TP1: " in text and " wins** by " in text and "| 1P1D | kv-aware |" in text


# ---- the P/D binding labels -------------------------------------------------------------------------

def test_pd_labels_are_defined_and_read_off_the_pd_shares() -> None:
    for label in PD_BINDINGS:
        assert LABELS[label][0] and LABELS[label][1]
    base = Diagnostics(0.5, 0.5, 0.0, 0.0, 0.0, ("ttft_p90<=1s",))
    assert classify(Diagnostics(**{**base.as_dict(), "transfer_share": 0.4})) == "link-bandwidth"
    blocked = {**base.as_dict(), "kv_blocked_share": 0.3, "recv_wait_share": 0.6, "transfer_share": 0.3,
               "decode_kv_short_share": 0.5}
    assert classify(Diagnostics(**blocked)) == "decode-kv-receive"
    roomy = {**blocked, "decode_kv_short_share": 0.0}                 # pulls waited, the pool had room
    assert classify(Diagnostics(**{**roomy, "decode_seq_full_share": 0.6})) == "seq-cap"
    assert classify(Diagnostics(**roomy)) != "decode-kv-receive"
    assert classify(Diagnostics(**{**blocked, "kv_blocked_share": 0.0})) == "link-bandwidth"  # no pull waited
    assert classify(base) == "kv-memory"                          # a replica's rules otherwise


def test_a_tiny_link_makes_link_bandwidth_the_binding_constraint() -> None:
    df = _trace(80, 0.1, 1000, 16)          # each prompt's KV: 63+ blocks of 2 MiB = 0.13 s at 1 GB/s
    plan = _plan(df, [Split(1, 1, "round-robin", "rdma-ndr", link_gbps=1.0)], 0.5, 0.1)
    t = plan.table.set_index("shape")
    assert t.loc["1P1D", "binding_constraint"] == "link-bandwidth"
    assert t.loc["unified", "binding_constraint"] not in PD_BINDINGS
    assert t.loc["1P1D", "ttft_transfer"] > 0.13 and t.loc["1P1D", "kv_blocked_per_1k"] == 0   # not the pool
    assert t.loc["1P1D", "max_qps_per_replica"] < t.loc["unified", "max_qps_per_replica"]


def test_a_decode_pool_barely_one_request_large_binds_on_decode_kv_receive() -> None:
    # decode: 129 usable blocks (max_model_len 2048 needs 128); a request needs ~107: one at a time
    base = {**BASE, "max_model_len": 2048}
    df = _trace(80, 0.5, 1600, 100)
    split = Split(1, 1, "round-robin", "nvlink4", decode_kw=(("num_gpu_blocks", 130),))
    plan = _plan(df, [split], 3.0, 0.1, base=base)
    x = plan.table.set_index("shape").loc["1P1D"]
    assert x["binding_constraint"] == "decode-kv-receive"
    assert x["max_qps_per_replica"] > 0
    assert x["ttft_kv_wait"] > 10 * x["ttft_transfer"]     # waiting for room, not for the link (NVLink)


def test_a_decode_batch_cap_with_a_roomy_pool_binds_on_seq_cap() -> None:
    """Issue 50, item 5: pulls wait because the decode batch is at --max-num-seqs while the pool
    is mostly free; the label names the sequence cap, not decode KV memory."""
    df = _trace(80, 0.05, 600, 200)
    split = Split(1, 1, "round-robin", "nvlink4", decode_kw=(("max_num_seqs", 2),))
    plan = _plan(df, [split], 3.0, 0.1)
    x = plan.table.set_index("shape").loc["1P1D"]
    assert x["kv_blocked_per_1k"] > 50                       # pulls did wait for the decode side
    assert x["binding_constraint"] == "seq-cap"


def test_a_decode_pool_smaller_than_one_request_is_a_noted_error_not_a_crash() -> None:
    split = Split(1, 1, "round-robin", "nvlink4", decode_kw=(("num_gpu_blocks", 60),))
    plan = _plan(_trace(40, 0.5, 500, 10), [split], 3.0, 0.1, base={**BASE, "max_model_len": 2048})
    x = plan.table.set_index("shape").loc["1P1D"]
    assert not x["slo_pass"] and x["binding_constraint"] == "does-not-fit"
    assert x["note"].startswith("decode instances: --max-model-len 2048: one request of that length needs 128 blocks")
    assert plan.table.set_index("shape").loc["unified", "slo_pass"]          # the unified candidate is unaffected


# ---- the CLI on the bundled data --------------------------------------------------------------------

def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(cli_main.app, ["plan", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def test_cli_disagg_on_the_bundled_trace_writes_the_section(tmp_path: Path) -> None:
    head = tmp_path / "head.csv"
    src = bundled_trace().read_text().splitlines()
    head.write_text("\n".join(src[:121]) + "\n")      # header + the first 120 requests
    out = tmp_path / "plan"
    code, text = kvsim(str(head), "--gpu", "h100", "--tp", "1", "--slo-ttft-p90", "2", "--slo-tpot-p90", "0.2",
                       "--seeds", "1", "--window", "120", "--search-iters", "1", "--workers", "1", "--no-band",
                       "--cost-model", "roofline", "--disagg", "1P1D", "--router", "round-robin,kv-aware",
                       "--out", str(out))
    assert code == 0, text
    t = pd.read_csv(out / "plan.csv")
    assert set(zip(t["shape"], t["router"], strict=True)) >= {("1P1D", "round-robin"), ("1P1D", "kv-aware")}
    assert "unified" in set(t["shape"])
    assert np.isfinite(t[[f"ttft_{p}" for p in PARTS]].to_numpy()).all()
    md = (out / "plan.md").read_text()
    assert "## Disaggregation: where xPyD wins and where it does not" in md and "TTFT breakdown" in md


@pytest.mark.parametrize("args, msg", [
    (("--disagg", "1"), "--disagg '1': '1': an xPyD split needs at least 2 instances"),
    (("--disagg", "1P1D", "--router", "kv-aware,bogus"), "--router 'bogus'"),
    (("--disagg", "1P1D", "--link", "carrier-pigeon"), "--link 'carrier-pigeon': expected one of"),
    (("--disagg", "1P1D", "--link-gbps", "0"), "--link-gbps 0.0: must be > 0"),
])
def test_bad_disagg_flags_are_one_line_errors(args: tuple[str, ...], msg: str) -> None:
    code, text = kvsim(str(bundled_trace()), "--slo-ttft-p99", "1", *args)
    assert code == 2, text
    assert msg in text and "\n" not in text.strip()


def test_cli_disagg_compares_tuned_candidates(tmp_path: Path) -> None:
    """Issue 50 item 4: the unified baseline gets the same batch-limit search as the split, and
    plan.md's verdict names the best setting of each side (both in the table). The doubled
    ``max_num_seqs`` (128) is searched only where the batch reached 64 above capacity: here on
    the unified replica (one instance takes every request), not on 1P1D's decode instance."""
    head = tmp_path / "head.csv"
    head.write_text("\n".join(bundled_trace().read_text().splitlines()[:121]) + "\n")
    out = tmp_path / "plan"
    code, text = kvsim(str(head), "--gpu", "h100", "--tp", "1", "--slo-ttft-p90", "2", "--slo-tpot-p90", "0.2",
                       "--seeds", "1", "--window", "120", "--search-iters", "1", "--workers", "1", "--no-band",
                       "--no-validate", "--cost-model", "roofline", "--disagg", "1P1D", "--router", "round-robin",
                       "--out", str(out), "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
                       "--max-num-seqs", "64")
    assert code == 0, text
    t = pd.read_csv(out / "plan.csv")
    want = {f"max_num_seqs={s} max_num_batched_tokens={b}" for s in (64, 128) for b in (2048, 8192)}
    base = {k for k in want if "max_num_seqs=64" in k}
    for shape in ("unified", "1P1D"):
        assert base <= set(t.loc[t["shape"] == shape, "knobs"]) <= want, shape
    assert len(t[t["shape"] == "unified"]) == 4 and len(t[t["shape"] == "1P1D"]) == 2
    u = t[t["shape"] == "unified"]
    best = u.loc[u["requests_per_gpu_dollar"].idxmax()]
    md = (out / "plan.md").read_text()
    assert f"Best unified replica ({best['knobs']})" in md
    assert "searched the same knobs (`max_num_batched_tokens` in {2048, 8192})" in md
    assert "searched at twice the cap" in md
    assert "max_num_batched_tokens=2048" in text and "max_num_batched_tokens=2…" not in text   # not cut
