"""The unified-vs-xPyD study (sim/fleet/xpyd.py): candidates, goodput on a rate grid, labels."""

from __future__ import annotations

from sim.fleet.xpyd import LOOSE, SloPair, splits, study
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
