"""The step-time error band in plans: replicas at the band's pessimistic edge, and the recommendation."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from sim.cluster.slo import Slo, SloTarget
from sim.config.schema import make_config
from sim.fleet.band import BandEdge, band_columns, band_edges, band_sentence, candidate_basis
from sim.fleet.candidate import Candidate
from sim.fleet.capacity import CapacityEstimate
from sim.fleet.prices import load_prices
from sim.fleet.spec import Demand, PlanSpec

DEMAND = Demand(mean_qps=10.0, peak_qps=20.0, scale=1.0, mean_output_tokens=100.0, mean_total_tokens=400.0,
                duration_s=600.0)


def spec(**base: object) -> PlanSpec:
    return PlanSpec(gpus=["a100-80gb", "h100"], tps=[1], slo=Slo((SloTarget("ttft", 0.99, 1.0),)),
                    base={"model": "llama-3.1-8b", **base}, prices=load_prices(), n_plus_k=1)


def cap(c: Candidate, qps: float) -> CapacityEstimate:
    return CapacityEstimate(c, qps, qps, qps, [], {}, "queueing", {})


def banded_stack(path: Path) -> str:
    """The committed vllm-v1 profile with a band of -10 % / +12 % (x1.5 when extrapolated)."""
    from sim.cost.stack import SCHEMA, STACKS_PATH
    entry = yaml.safe_load(STACKS_PATH.read_text())["stacks"]["vllm-v1"]
    entry["band"] = {"optimistic": -0.1, "pessimistic": 0.12, "optimistic_extrapolated": -0.15,
                     "pessimistic_extrapolated": 0.18, "basis": "test"}
    path.write_text(yaml.safe_dump({"schema": SCHEMA, "stacks": {"banded": entry}}))
    return str(path)


def test_pessimistic_edge_slows_steps_by_the_band_and_sizes_for_it(tmp_path: Path) -> None:
    a100, h100 = Candidate("a100-80gb", 1), Candidate("h100", 1)
    stack = banded_stack(tmp_path / "banded.yaml")
    calls: list[tuple[float, list[Candidate]]] = []

    def search(s: PlanSpec, cs: list[Candidate]) -> list[CapacityEstimate]:
        f = float(s.base["step_time_scale"])  # type: ignore[arg-type]
        assert make_config(**s.base).step_time_scale == f  # the slowed config is a valid one
        calls.append((f, cs))
        return [cap(c, 4.0) for c in cs]  # capacity at the edge

    edges = band_edges(spec(serving_stack=stack), [cap(a100, 5.0), cap(h100, 7.0)], DEMAND, search)
    bands = {c.gpu: candidate_basis(c, spec(serving_stack=stack).base) for c in (a100, h100)}
    # default stack vllm-v1 was fitted end to end on H100 (issue 16): H100 fitted, A100 extrapolated
    assert bands["h100"].basis == "fitted" and bands["a100-80gb"].basis == "extrapolated"
    # one search per distinct factor (fitted and extrapolated bands differ), each 1 + pessimistic band
    assert sorted(f for f, _ in calls) == sorted(round(1 + b.band[1], 4) for b in bands.values())
    for c in (a100, h100):
        assert edges[c].qps == 4.0 and edges[c].replicas == 5 + 1      # ceil(20 / 4) + N+1
        assert edges[c].band == bands[c.gpu].band


def test_an_exact_cost_model_has_no_band_and_no_extra_search() -> None:
    c = Candidate("h100", 1)

    def search(s: PlanSpec, cs: list[Candidate]) -> list[CapacityEstimate]:
        raise AssertionError("no band: no search")

    edges = band_edges(spec(cost_model="constant:0.01"), [cap(c, 5.0)], DEMAND, search)
    assert edges[c].qps == 5.0 and edges[c].replicas == 4 + 1 and edges[c].basis == "exact"


def test_table_columns_and_the_recommendation_sentence() -> None:
    c, s = Candidate("h100", 1), spec()
    b = candidate_basis(c, s.base)
    table = pd.DataFrame([{"gpu": "h100", "tp": 1, "knobs": "defaults", "replicas": 5, "price_per_gpu_hour": 2.0},
                          {"gpu": "h100", "tp": 1, "knobs": "max_num_seqs=64", "replicas": 6,
                           "price_per_gpu_hour": 2.0}])
    t = band_columns(table, {c: BandEdge(c, b.basis, b.band, 4.0, 7)}, s)
    assert t.loc[0, "replicas_pessimistic"] == 7 and t.loc[1, "replicas_pessimistic"] is pd.NA
    assert t.loc[0, "cost_per_hour_pessimistic"] == 14.0 and t.loc[0, "cost_basis"] == "fitted"
    assert t.loc[0, "band_pessimistic_pct"] == pytest.approx(100 * b.band[1])
    text = band_sentence(t.loc[0])
    assert "**7 replicas" in text and "central estimate above (5)" in text and "*fitted*" in text
    held = t.loc[0].copy()
    held["replicas_pessimistic"] = 5
    assert "**5 replicas either way**" in band_sentence(held)
    assert band_sentence(t.loc[1]) == ""  # knobs that were not the best of their shape: no edge searched
