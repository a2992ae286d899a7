"""The unified-vs-xPyD study (sim/fleet/xpyd.py): candidates, goodput on a rate grid, labels."""

from __future__ import annotations

from sim.fleet.xpyd import LOOSE, SloPair, best, defaults, knob_grid, search, splits, study
from sim.fleet.xpyd_table import markdown
from tests.conftest import make_trace


def test_splits_of_four_gpus() -> None:
    assert splits(4) == [(0, 4), (1, 3), (2, 2), (3, 1)]


def test_study_reports_requests_per_gpu_dollar_and_a_binding_constraint() -> None:
    rows = [{"arrival_s": 0.5 * i, "prompt_tokens": 600 + 40 * (i % 9), "output_tokens": 20 + i % 13}
            for i in range(40)]
    base = {"model": "llama-3.1-8b", "gpu": "h100", "cost_model": "roofline", "max_model_len": 4096}
    impossible = SloPair("impossible", 1e-6, 1e-6)
    df = study(make_trace(rows), base, 2, [LOOSE, impossible], [1.0, 4.0])
    assert list(df["candidate"].unique()) == ["unified", "1P1D"]
    loose = df[df["slo"] == "loose"]
    assert (loose["goodput_qps"] > 0).all()
    assert (loose["requests_per_gpu_dollar"] > 0).all()
    nope = df[df["slo"] == "impossible"]
    assert (nope["goodput_qps"] == 0).all()
    assert set(nope["binding"]) <= {"ttft", "tpot", "link-bandwidth", "decode-kv-receive"}
    pd_row = loose[loose["candidate"] == "1P1D"].iloc[0]
    assert pd_row["transfer_p90_s"] > 0                              # KV moved over the link


def test_every_candidate_searches_the_same_knob_grid_and_reports_its_best() -> None:
    rows = [{"arrival_s": 0.25 * i, "prompt_tokens": 300 + 700 * (i % 4), "output_tokens": 8 + i % 11}
            for i in range(24)]
    base = {"model": "llama-3.1-8b", "gpu": "h100", "cost_model": "roofline", "max_model_len": 4096}
    grid = search(make_trace(rows), base, 2, [SloPair("tpot", 0.1, 0.012), LOOSE], [1.0, 8.0])
    want = {(k["max_num_batched_tokens"], k["max_num_seqs"]) for k in knob_grid(base)}
    assert len(want) >= 4 and (2048, 2 * defaults(base)["max_num_seqs"]) in want
    for _, g in grid.groupby("candidate"):
        assert set(zip(g["max_num_batched_tokens"], g["max_num_seqs"], strict=True)) == want
    unified = grid[(grid["candidate"] == "unified") & (grid["slo"] == "tpot")]
    assert unified["goodput_qps"].nunique() > 1                        # the knobs matter here
    df = best(grid, defaults(base))
    assert len(df) == 4 and (df["settings"] == len(want)).all()
    for _, r in df.iterrows():
        mine = grid[(grid["candidate"] == r["candidate"]) & (grid["slo"] == r["slo"])]
        assert r["goodput_qps"] == mine["goodput_qps"].max()
        won = mine[(mine["max_num_batched_tokens"] == r["max_num_batched_tokens"])
                   & (mine["max_num_seqs"] == r["max_num_seqs"])]
        assert won["goodput_qps"].iloc[0] == r["goodput_qps"]          # the row names the winning knobs
        assert r["goodput_qps"] >= r["goodput_untuned_qps"]
    md = markdown(df, defaults(base)).splitlines()[2:]
    assert len(md) == len(df)
    for line, (_, r) in zip(md, df.iterrows(), strict=True):          # each row names its knobs
        assert f"| {r['max_num_batched_tokens']} / {r['max_num_seqs']}" in line
