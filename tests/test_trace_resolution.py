"""Coarse timestamps (issue 20, item 1): detected, said, and spread over their resolution by default.

The Mooncake trace records arrivals about 3 s apart, ~90 % of them in groups with one timestamp;
replayed as-is each group is a simultaneous burst the service never saw.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from sim import load_trace, make_config, simulate
from sim.cli.main import _load, app
from tests.conftest import make_trace
from tests.helpers import BUNDLED, MOONCAKE_SLICE
from workloads.resolution import spread_arrivals, timestamp_resolution

_load()


def _short_mooncake() -> object:
    """The bundled Mooncake slice's requests under 8k prompt tokens (486, ~1.5 req/s): one H100 keeps up."""
    df = load_trace(MOONCAKE_SLICE).df
    return make_trace(df[df["prompt_tokens"] < 8000].reset_index(drop=True).to_dict("records"))


def test_mooncake_slice_is_detected_coarse_and_said_in_trace_info_and_notes() -> None:
    tr = load_trace(MOONCAKE_SLICE)
    res = timestamp_resolution(tr.df["arrival_s"].to_numpy())
    assert res is not None and res.coarse
    assert res.equal_share > 0.8
    assert 2.9 < res.granularity_s < 3.1
    assert any("timestamps are coarse" in n for n in tr.notes)
    out = CliRunner().invoke(app, ["trace", "info", str(MOONCAKE_SLICE), "--json"])
    assert out.exit_code == 0, out.output
    ts = json.loads(out.output)["timestamps"]
    assert ts["coarse"] is True and ts["equal_share"] > 0.8
    human = CliRunner().invoke(app, ["trace", "info", str(MOONCAKE_SLICE)]).output
    assert "coarse" in human and "--no-arrival-jitter" in human


def test_bundled_azure_slice_is_fine_grained_and_replayed_unchanged() -> None:
    tr = load_trace(BUNDLED)
    res = timestamp_resolution(tr.df["arrival_s"].to_numpy())
    assert res is not None and not res.coarse and res.equal_share == 0.0
    assert not any("coarse" in n for n in tr.notes)
    on = simulate(make_config(arrival_jitter=True), tr).requests
    off = simulate(make_config(arrival_jitter=False), tr).requests
    pd.testing.assert_frame_equal(on, off, check_exact=True)


def test_spread_stays_inside_each_group_interval_keeps_order_and_is_seeded() -> None:
    t = np.repeat(np.arange(0.0, 60.0, 3.0), 10)  # 20 groups of 10 at 3 s granularity
    a = spread_arrivals(t, np.random.default_rng(1))
    b = spread_arrivals(t, np.random.default_rng(1))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, spread_arrivals(t, np.random.default_rng(2)))
    assert np.all(np.diff(a) >= 0)
    assert np.all((a >= t) & (a < t + 3.0))
    assert len(np.unique(a)) == len(a)
    # spread uniformly: the offsets fill the interval, not a corner of it
    assert 1.0 < float(np.mean(a - t)) < 2.0


def test_offline_batch_and_small_bursts_are_not_spread() -> None:
    batch = np.zeros(500)
    assert spread_arrivals(batch, np.random.default_rng(0)) is batch
    small = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 2.0])
    assert spread_arrivals(small, np.random.default_rng(0)) is small


def test_jitter_removes_the_false_bursts_on_mooncake_and_no_jitter_replays_as_is() -> None:
    tr = _short_mooncake()
    spread = simulate(make_config(), tr)  # default: arrival_jitter on
    as_is = simulate(make_config(arrival_jitter=False), tr)
    raw = np.sort(tr.df["arrival_s"].to_numpy())
    assert np.array_equal(np.sort(as_is.requests["arrival_s"].to_numpy()), raw)
    assert not np.array_equal(np.sort(spread.requests["arrival_s"].to_numpy()), raw)
    # the bursts were the queueing: spread, the median TTFT falls to a fraction
    assert spread.summary.ttft_s.p50 < 0.5 * as_is.summary.ttft_s.p50
    assert spread.summary.ttft_s.p99 < as_is.summary.ttft_s.p99


def test_no_arrival_jitter_flag_and_config_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("arrival_jitter: false\n")
    for extra in (["--no-arrival-jitter"], ["--config", str(cfg)]):
        out = CliRunner().invoke(app, ["simulate", str(MOONCAKE_SLICE), "--out", str(tmp_path / "r"),
                                       "--max-model-len", "131072", "--cost-model", "constant:0.001", *extra])
        assert out.exit_code == 0, out.output
        got = json.loads((tmp_path / "r" / "summary.json").read_text())
        assert got["config"]["arrival_jitter"] is False


def test_the_mooncake_diagnosis_spreading_the_bursts_relieves_the_probes() -> None:
    """The issue's case in capacity probes: llama-3.1-8b on 2 x H100 over the Mooncake slice.
    Replayed as-is each timestamp group is a burst: at 0.3 QPS its TPOT p99 is several times the
    spread replay's, and at 2 QPS its TTFT p90 is well above the spread one's (the SLO verdicts
    at a given load move with the cost model; the burst's penalty is what this checks)."""
    from sim.cluster.slo import Slo, SloTarget
    from sim.fleet.candidate import Candidate
    from sim.fleet.capacity import SearchSpec, _probe
    from sim.fleet.workload import draw_window

    slo = Slo((SloTarget("ttft", 0.9, 5.0), SloTarget("tpot", 0.9, 0.1)))
    window = draw_window(load_trace(MOONCAKE_SLICE).df, 0, 0, 300, 0.9)
    probes = {}
    for qps in (0.3, 2.0):
        for jitter in (True, False):
            spec = SearchSpec(slo, {"model": "llama-3.1-8b", "max_model_len": 131072, "arrival_jitter": jitter},
                              0.3, 0.01, 10.0, window=300)
            probes[qps, jitter], _, _ = _probe(Candidate("h100", 2).config(dict(spec.base)), spec, window, qps)
    assert probes[0.3, False].tpot_p99 > 3 * probes[0.3, True].tpot_p99
    ttft_p90 = {j: dict((t.metric, v) for t, v in probes[2.0, j].observed)["ttft"] for j in (True, False)}
    assert ttft_p90[False] > 1.25 * ttft_p90[True]


# ---- the coarse-timestamp rule (issue 49, point 6): spread only a coarse clock ----------------------
def _bursts(n: int = 200, size: int = 5, every_s: float = 0.040) -> object:
    """``n`` requests in bursts of ``size`` every ``every_s`` seconds: deliberate, not a coarse clock."""
    t = np.repeat(np.arange(n // size) * every_s, size)
    return make_trace([{"arrival_s": float(x), "prompt_tokens": 64, "output_tokens": 4} for x in t])


def test_bursts_40_ms_apart_keep_their_times_exactly_and_trace_info_says_why(tmp_path: Path) -> None:
    tr = _bursts()
    res = timestamp_resolution(tr.df["arrival_s"].to_numpy())
    assert res is not None and not res.coarse and res.equal_share > 0.5      # many ties, yet no coarse clock
    assert "as is" in res.reason() and "40 ms" in res.reason() and "bursts" in res.reason()
    ran = simulate(make_config(cost_model="constant:0.001"), tr).requests    # arrival_jitter on (default)
    assert np.array_equal(np.sort(ran["arrival_s"].to_numpy()), tr.df["arrival_s"].to_numpy())
    path = tmp_path / "bursts.csv"
    tr.df[["arrival_s", "prompt_tokens", "output_tokens"]].to_csv(path, index=False)
    out = CliRunner().invoke(app, ["trace", "info", str(path)])
    assert out.exit_code == 0, out.output
    rule = next(line for line in out.output.splitlines() if "arrival rule" in line)
    assert "as is" in rule and "40 ms" in rule
    ts = json.loads(CliRunner().invoke(app, ["trace", "info", str(path), "--json"]).output)["timestamps"]
    assert ts["coarse"] is False and ts["grid_s"] < 1.0


def test_the_mooncake_slice_is_still_spread_and_trace_info_names_its_grid() -> None:
    t = load_trace(MOONCAKE_SLICE).df["arrival_s"].to_numpy()
    res = timestamp_resolution(t)
    assert res is not None and res.coarse and 2.9 < res.grid_s < 3.1 and res.on_grid > 0.95
    spread = spread_arrivals(t, np.random.default_rng(0))
    assert not np.array_equal(spread, t)
    rule = next(line for line in CliRunner().invoke(app, ["trace", "info", str(MOONCAKE_SLICE)]).output.splitlines()
                if "arrival rule" in line)
    assert "spread (coarse clock)" in rule and "3 s grid" in rule


def test_whole_second_stamps_with_ties_are_coarse_burstgpt_style() -> None:
    rng = np.random.default_rng(4)
    t = np.floor(np.cumsum(rng.exponential(1 / 3.0, 600)))   # 3 req/s stamped in whole seconds
    res = timestamp_resolution(t)
    assert res is not None and res.coarse and res.grid_s == 1.0


def test_ties_off_any_grid_or_a_sub_second_clock_replay_as_is() -> None:
    rng = np.random.default_rng(5)
    groups = np.cumsum(rng.uniform(1.0, 4.0, 60))            # burst times >= 1 s apart, but continuous
    off_grid = timestamp_resolution(np.repeat(groups, 4))
    assert off_grid is not None and not off_grid.coarse and "no regular clock" in off_grid.reason()
    tenth = timestamp_resolution(np.repeat(np.arange(50) * 0.1, 4))   # a 100 ms clock
    assert tenth is not None and not tenth.coarse and "finer than" in tenth.reason()


def test_kvsims_own_arrivals_are_never_spread(tmp_path: Path) -> None:
    """A generator's gamma arrivals, vLLM's request-rate arrivals and an inf burst replay as is."""
    from workloads.gen.generate import generate, parse_spec
    from workloads.request_rate import arrival_stream, request_rate_arrivals

    gen = generate(parse_spec({"num_requests": 400, "arrivals": {"kind": "gamma", "rate": 20.0, "cv": 3.0},
                               "prompt": {"kind": "fixed", "value": 8}, "output": {"kind": "fixed", "value": 2}}),
                   np.random.default_rng(0))["arrival_s"].to_numpy()
    for t in (gen, request_rate_arrivals(400, 50.0, 0.2, arrival_stream(1)), np.zeros(400)):
        assert spread_arrivals(t, np.random.default_rng(0)) is t


def test_plan_spreads_a_coarse_clock_before_rescaling_it_as_simulate_would() -> None:
    """A plan's probes rescale time before ingest sees it: a 3 s grid sped up 20x would look like
    150 ms bursts and stay unspread, so the plan spreads on the file's clock first, drawing what
    simulate draws for the same seed."""
    from sim.io.ingest import ARRIVAL_STREAM, arrival_times
    from workloads.load import Load, workload_of
    from workloads.resolution import JITTER_STREAM

    assert JITTER_STREAM == ARRIVAL_STREAM
    tr = load_trace(MOONCAKE_SLICE)
    raw = tr.df["arrival_s"].to_numpy()
    assert not timestamp_resolution(raw / 20).coarse                      # why: the compressed clock
    spread = workload_of(Load(), MOONCAKE_SLICE, None, 0, jitter_seed=3).df["arrival_s"].to_numpy()
    assert np.array_equal(spread, arrival_times(tr, make_config(seed=3)))
    assert not timestamp_resolution(spread / 20).coarse and timestamp_resolution(spread / 20).equal_share == 0
