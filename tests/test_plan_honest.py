"""Plans that mean what they say (issue 20, items 2-3): quantiles of early-stopped probes are
labelled lower bounds, every failing target is listed, plan.md makes one recommendation, its
caveat compares like with like, and it names the serving-stack profile and engine it represents."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from sim.cluster.slo import Slo, SloTarget
from sim.fleet.binding import Diagnostics
from sim.fleet.candidate import Candidate
from sim.fleet.capacity import CapacityEstimate, Probe, SeedCapacity
from sim.fleet.explain import infeasible_note, ranking_caveat
from sim.fleet.report import recommendation, serving_stack_line
from sim.run.build import build

SLO = Slo((SloTarget("ttft", 0.99, 1.0), SloTarget("tpot", 0.99, 0.1)))
TTFT, TPOT = SLO.targets


def _infeasible(stopped_early: bool) -> CapacityEstimate:
    """The issue's case: one probe at the lowest load, TTFT p99 8.37 s and TPOT p99 484 ms, the
    monitor stopped it as soon as TTFT was certain to fail (so it named only TTFT)."""
    cand = Candidate("h100", 1)
    probe = Probe(0.5, False, 0.06, 0.05, 8.37, 0.484, 0.1, stopped_early, ((TTFT, 8.37), (TPOT, 0.484)))
    above = Diagnostics(0.9, 0.0, 0.0, 0.0, 0.0, (TTFT.name,))
    seed = SeedCapacity(cand, 0, 0.0, [probe], above=above)
    return CapacityEstimate(cand, 0.0, 0.0, 0.0, [seed], {}, "prefill-queueing", {})


def test_an_early_stopped_probe_shows_lower_bounds_and_every_failing_target() -> None:
    note = infeasible_note(_infeasible(True), SLO)
    assert "lower bound, probe stopped early" in note
    assert "TTFT p99 >= 8.37 s" in note
    fails = note.split("fails ", 1)[1]
    assert TTFT.name in fails and TPOT.name in fails  # TPOT 484 ms > 100 ms: listed even if the monitor did not
    full = infeasible_note(_infeasible(False), SLO)
    assert "lower bound" not in full and "TTFT p99 8.37 s" in full


def _row(**kw: object) -> dict[str, object]:
    base = {"gpu": "h100", "tp": 1, "knobs": "defaults", "replicas": 3, "gpus": 3, "slo_pass": True,
            "cost_per_hour": 8.85, "cost_per_1m_out_tokens": 0.211, "autoscale_cost_per_day": 177.0,
            "max_qps_per_replica": 26.0, "qps_ci_low": 17.6, "qps_ci_high": 34.3, "peak_qps": 58.0,
            "headroom_pct": 25.6, "binding_constraint": "prefill-queueing", "attainment": 0.9995,
            "attainment_lower": 0.9991, "cost_basis": "extrapolated", "band_pessimistic_pct": 60.0,
            "qps_pessimistic": 14.0, "replicas_pessimistic": 5, "cost_per_hour_pessimistic": 14.75, "note": ""}
    return {**base, **kw}


def test_plan_md_makes_one_recommendation_sized_for_the_band_edge() -> None:
    plan = SimpleNamespace(best=pd.Series(_row()), table=pd.DataFrame([_row()]))
    text = recommendation(plan)  # type: ignore[arg-type]
    assert text.lower().count("recommended") == 1
    assert "**Recommended: 5 x h100 (TP=1, defaults)** = 5 GPUs, $14.75/h" in text
    assert "3 replicas ($8.85/h) would do only if steps are as fast as predicted" in text
    held = SimpleNamespace(best=pd.Series(_row(replicas_pessimistic=3, cost_per_hour_pessimistic=8.85)),
                           table=pd.DataFrame([_row()]))
    text = recommendation(held)  # type: ignore[arg-type]
    assert "**Recommended: 3 x h100" in text and "3 replicas either way" in text
    assert text.lower().count("recommended") == 1


def _caveat_row(gpu: str, cost: float, edge: float, basis: str = "extrapolated") -> dict[str, object]:
    return {"gpu": gpu, "tp": 1, "slo_pass": True, "cost_per_hour": cost, "cost_basis": basis,
            "cost_per_hour_pessimistic": edge}


def test_the_caveat_compares_like_with_like() -> None:
    # the issue's false caveat: equal central costs, equal pessimistic edges; #1's edge is above
    # #2's *central* cost, but at both edges the order holds
    tie = pd.DataFrame([_caveat_row("h100", 10.0, 15.0), _caveat_row("l40s", 10.0, 15.0)])
    assert ranking_caveat(tie) == ""
    flips = pd.DataFrame([_caveat_row("h100", 10.0, 16.0), _caveat_row("l40s", 12.0, 14.0)])
    text = ranking_caveat(flips)
    assert "at both pessimistic band edges #2 costs less ($14.00/h vs $16.00/h)" in text
    assert "20% cheaper" in text and "central estimate" in text


def test_plan_md_names_the_serving_stack_and_the_engine_it_represents() -> None:
    cand = Candidate("h100", 1)
    plan = SimpleNamespace(best=pd.Series(_row()), capacities=[SimpleNamespace(candidate=cand)],
                           spec=SimpleNamespace(base={"model": "llama-3.1-8b"}))
    line = serving_stack_line(plan)  # type: ignore[arg-type]
    stack = build(cand.config({"model": "llama-3.1-8b"})).cost.stack  # type: ignore[attr-defined]
    represents = getattr(stack, "engine", "") or stack.description
    assert line.startswith(f"Serving stack: `{stack.name}` profile, representing ") and represents in line
    roof = SimpleNamespace(best=pd.Series(_row()), capacities=[SimpleNamespace(candidate=cand)],
                           spec=SimpleNamespace(base={"model": "llama-3.1-8b", "cost_model": "roofline"}))
    assert "none modelled" in serving_stack_line(roof)  # type: ignore[arg-type]
