"""The planner against queueing theory (M/D/c), and the queueing helpers themselves.

Why a replica is an M/D/c queue here: with the ``constant:S`` cost model every engine step
takes exactly S seconds whatever it computes. A request with a short prompt (one prefill step
that also samples the first token) and ``O`` output tokens therefore occupies one of the
replica's ``c = max_num_seqs`` batch slots for exactly ``O`` steps, ``D = O x S`` seconds,
and a waiting request takes the slot at the step boundary where the previous one finishes.
The KV pool is far larger than ``c`` requests, so nothing else can queue it. Arrivals are
Poisson, so one replica is M/D/c with ``D = O S``.

The SLO ``TTFT p90 <= 2.05 S`` is met exactly by requests that find a free slot: they wait at
most one step boundary (< S) plus their prefill step (S); a request that finds all slots busy
waits for a departure, O(D) = 50 S. So the attained share is P(no wait) = 1 - P(Q >= c), and
the planner's capacity must be the largest rate at which P(wait) <= 1 - p, where p is the
share that clears the Wilson lower bound at 0.9 for the number of requests checked. Replicas
for a demand Lambda = ceil(Lambda / capacity) must then equal the M/D/c count.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.fleet.planner import PlanSpec, run_plan
from sim.fleet.prices import load_prices
from sim.fleet.queueing import erlang_c, max_rate, md1_wait_cdf, mdc_queue_dist, mdc_wait_prob
from sim.fleet.slo import Slo, SloTarget, wilson_lower

S, OUT, P, C = 0.02, 50, 32, 4
D = OUT * S


def poisson_frame(rate: float, n: int, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(1 / rate, n)),
                         "prompt_tokens": np.full(n, P), "output_tokens": np.full(n, OUT)})


def test_erlang_c_textbook_values() -> None:
    """C(1, a) = a; C(2, 1) = 1/3 (hand-computed: a^2/2 x 2/(2-1) / (1 + 1 + 1))."""
    assert erlang_c(1, 0.3) == pytest.approx(0.3)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(3, 3.5) == 1.0


def test_mdc_chain_matches_md1_exact_formula() -> None:
    """For c = 1, P(Q <= k) from the chain is P(W <= k D) from Erlang's M/D/1 formula."""
    lam = 0.7
    p = mdc_queue_dist(1, lam, 1.0)
    assert p[0] == pytest.approx(1 - lam, abs=1e-9)           # P(idle) = 1 - rho
    for k in (1, 2, 3):
        assert p[: k + 1].sum() == pytest.approx(md1_wait_cdf(lam, 1.0, float(k)), abs=1e-9)


def test_mdc_waits_less_than_mmc() -> None:
    """Deterministic service waits less than exponential at the same load (Erlang-C bounds it)."""
    for c, a in ((2, 1.2), (4, 3.0), (8, 6.5)):
        assert mdc_wait_prob(c, a, 1.0) < erlang_c(c, a)


def _target_share(n: int, q: float = 0.9) -> float:
    """Smallest observed share whose Wilson lower bound clears ``q`` with ``n`` requests."""
    hits = next(h for h in range(n + 1) if wilson_lower(h, n) >= q)
    return hits / n


@pytest.mark.slow
def test_planner_replicas_match_mdc() -> None:
    window = 800
    checked = int(window * 0.9) - int(int(window * 0.9) * 0.1)     # thinned, minus warm-up
    p_ok = _target_share(checked)
    lam_theory = max_rate(lambda lam: mdc_wait_prob(C, lam, D) <= 1 - p_ok, hi=C / D)
    demand = 4.5 * lam_theory                                    # mid-way between 4 and 5
    n_theory = math.ceil(demand / lam_theory)
    assert n_theory == 5
    slo = Slo((SloTarget("ttft", 0.9, 2.05 * S),))
    spec = PlanSpec(gpus=["h100"], tps=[1], slo=slo, prices=load_prices(),
                    base={"model": "llama-3.1-8b", "cost_model": f"constant:{S}", "max_num_seqs": C},
                    target_qps=demand, peak_window_s=1e9, replications=3, window=window, iters=4,
                    validate=False)
    plan = run_plan(poisson_frame(demand, 6000), spec)
    row = plan.table.iloc[0]
    assert row["max_qps_per_replica"] == pytest.approx(lam_theory, rel=0.12)
    assert row["replicas"] == n_theory
    # and Erlang-C (exponential service) would have over-provisioned or matched, never under
    lam_mmc = max_rate(lambda lam: erlang_c(C, lam * D) <= 1 - p_ok, hi=C / D)
    assert math.ceil(demand / lam_mmc) >= row["replicas"]
