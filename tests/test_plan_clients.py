"""`kvsim plan --max-concurrency N`: a fleet sized for N closed-loop clients
(sim/fleet/clients_plan.py), as `vllm bench serve --max-concurrency` and InferenceX load it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from sim.cluster.slo import Slo, SloTarget
from sim.fleet.candidate import Candidate
from sim.fleet.capacity import Probe, SearchSpec, search_seed
from sim.fleet.clients_plan import UNVALIDATED, client_search, replay_clients, steady
from sim.fleet.validate import ValidateTask
from tests.helpers import BUNDLED, kvsim, write_sessions

SLO = ["--slo-ttft-p99", "0.3", "--slo-tpot-p99", "0.02"]
FAST = ["--seeds", "2", "--workers", "1", "--window", "500", "--no-band"]


def _trace() -> pd.DataFrame:
    from workloads import load_trace

    return load_trace(BUNDLED).df


def _searched(limit: int, n: int, iters: int = 3) -> tuple[float, list[float]]:
    """The capacity a client search finds when exactly ``limit`` clients pass, and its probes."""
    seen: list[float] = []

    def probe(cand: Candidate, spec: SearchSpec, window: pd.DataFrame, q: float) -> Any:
        seen.append(q)
        return Probe(q, q <= limit, 1.0, 1.0, 0.0, 0.0, 0.0), {"q": q}, None

    base = SearchSpec(slo=Slo((SloTarget("ttft", 0.99, 1.0),)), base={"cost_model": "constant:0.01"},
                      q_start=1.0, q_min=1.0, q_max=1.0, iters=iters)
    df = pd.DataFrame({"arrival_s": np.zeros(2000), "prompt_tokens": 10, "output_tokens": 5})
    spec = client_search(base, n, window=2000)
    return search_seed(Candidate("h100", 1), spec, 0, df, probe).qps, seen


@pytest.mark.parametrize(("limit", "n"), [(1, 64), (7, 64), (50, 64), (63, 64), (13, 20)])
def test_search_finds_whole_clients_below_n(limit: int, n: int) -> None:
    """Whole numbers only, never above N, and enough bisection lands on the exact limit."""
    found, seen = _searched(limit, n, iters=10)
    assert found == limit
    assert all(q == int(q) and 1 <= q <= n for q in seen)
    assert len(seen) == len(set(seen))  # no probe repeated


def test_search_stops_at_n_when_one_replica_takes_all() -> None:
    found, seen = _searched(500, 64)
    assert (found, seen) == (64, [64.0])


def test_search_is_capped_by_the_window() -> None:
    """A probe must judge at least half its window: at most a quarter of it in clients."""
    base = SearchSpec(slo=Slo((SloTarget("ttft", 0.99, 1.0),)), base={}, q_start=1.0, q_min=1.0, q_max=1.0)
    assert client_search(base, 10_000, window=400).q_max == int(400 * 0.9) // 4


def test_steady_leaves_out_the_opening_burst_and_the_drain() -> None:
    req = pd.DataFrame({"request_id": [str(i) for i in range(99, -1, -1)]})  # any order in
    kept = steady(req, 8, 0.1).request_id.astype(int).tolist()
    assert kept == list(range(10, 100 - 7))  # max(8, 10) first out, the last 7 out
    assert steady(req, 30, 0.1).request_id.astype(int).tolist() == list(range(30, 71))


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "p"
    code, text = kvsim("plan", str(BUNDLED), "--max-concurrency", "100", *SLO, *FAST,
                       "--api-server-count", "0", "--out", str(out))
    assert code == 0, text
    return out


def test_fleet_is_sized_for_n_clients_and_validated(plan_dir: Path) -> None:
    t = pd.read_csv(plan_dir / "plan.csv")
    r = t.iloc[0]
    assert r["clients"] == 100 and r["validated"] and r["slo_pass"]
    cap = r["max_clients_per_replica"]
    assert 1 <= cap < 100 and r["replicas_math"] == math.ceil(100 / cap)
    assert r["max_qps_per_replica"] > 0 and np.isnan(r["peak_qps"])
    # the served rate at capacity prices the tokens: N x the per-client rate, at least the fleet's
    per_client = r["max_qps_per_replica"] / cap
    tokens_h = 100 * per_client * 3600 / 1e6
    out_tokens = _trace()["output_tokens"].mean()
    assert r["cost_per_1m_out_tokens"] == pytest.approx(r["cost_per_hour"] / (tokens_h * out_tokens), rel=0.05)


def test_each_replication_brackets_its_capacity(plan_dir: Path) -> None:
    """The capacity is a passing probe with a failing one above it (the search's own evidence)."""
    p = pd.read_csv(plan_dir / "capacity_probes.csv")
    for _, g in p.groupby("replication"):
        best = g[g["passed"]]["qps"].max()
        assert (g[~g["passed"]]["qps"] > best).any() and not (g[~g["passed"]]["qps"] <= best).any()
        assert (g["qps"] == g["qps"].round()).all()


def test_validation_replays_n_clients_through_the_fleet(plan_dir: Path) -> None:
    """The routed replay that passed keeps N requests in flight, spread over every replica."""
    t = pd.read_csv(plan_dir / "plan.csv").iloc[0]
    task = ValidateTask(Candidate("h100", 1), {"api_server_count": 0}, int(t["replicas"]),
                        Slo((SloTarget("ttft", 0.99, 0.3), SloTarget("tpot", 0.99, 0.02))),
                        "least-outstanding-tokens", clients=100)
    df = _trace().assign(arrival_s=0.0)
    ev, fleet, _ = replay_clients(task, int(t["replicas"]), df)
    req = fleet.requests
    assert ev.passed and (req["status"] == "finished").all()
    assert req["replica"].nunique() == int(t["replicas"])
    first = np.sort(req["arrival_s"].to_numpy())
    assert (first[:100] == 0).all() and first[100] > 0  # 100 sent at once, the rest as slots free


def test_bundle_says_what_was_sized(plan_dir: Path) -> None:
    md = (plan_dir / "plan.md").read_text()
    assert "100 clients sending back to back" in md and "clients within the SLO" in md
    assert not (plan_dir / "pareto.png").exists()  # no demand rate to plot cost against
    assert yaml.safe_load((plan_dir / "inputs.yaml").read_text())["load"]["max_concurrency"] == 100


def test_behind_the_api_server_it_says_not_validated(tmp_path: Path) -> None:
    code, text = kvsim("plan", str(BUNDLED), "--max-concurrency", "16", *SLO, *FAST, "--out", str(tmp_path / "p"))
    assert code == 0, text
    r = pd.read_csv(tmp_path / "p" / "plan.csv").iloc[0]
    assert not r["validated"] and UNVALIDATED in r["note"]
    assert "Not validated" in (tmp_path / "p" / "plan.md").read_text()


@pytest.mark.parametrize(("extra", "says"), [
    (["--max-concurrency", "200"], "too few to judge 200 clients"),
    (["--max-concurrency", "4", "--disagg", "1P1D"], "with --disagg"),
    (["--max-concurrency", "4", "--rate-scale", "2"], "give one"),
    (["--max-concurrency", "0"], "whole number >= 1"),
])
def test_refusals_are_one_line(tmp_path: Path, extra: list[str], says: str) -> None:
    code, text = kvsim("plan", str(BUNDLED), *SLO, *FAST, "--out", str(tmp_path / "p"), *extra)
    assert code == 2 and len(text.strip().splitlines()) == 1 and says in text, text
    assert not (tmp_path / "p").exists()


def test_a_pasted_bench_line_sets_n(tmp_path: Path) -> None:
    code, text = kvsim("plan", str(BUNDLED), *SLO, *FAST, "--api-server-count", "0", "--no-validate",
                       "--out", str(tmp_path / "p"), "--", "vllm", "bench", "serve", "--max-concurrency", "12")
    assert code == 0, text
    assert pd.read_csv(tmp_path / "p" / "plan.csv").iloc[0]["clients"] == 12


def test_session_traces_stay_refused(tmp_path: Path) -> None:
    write_sessions(tmp_path / "s.jsonl")
    code, text = kvsim("plan", str(tmp_path / "s.jsonl"), *SLO, "--out", str(tmp_path / "p"))
    assert code == 2 and "session trace" in text, text


def test_a_request_rate_besides_n_holds_the_clients_back(tmp_path: Path, plan_dir: Path) -> None:
    """--request-rate R with N clients, as vLLM's: a request waits for its time and a slot. At a
    low rate the N clients are mostly idle, so the fleet is smaller than back to back's."""
    code, text = kvsim("plan", str(BUNDLED), *SLO, *FAST, "--api-server-count", "0", "--out", str(tmp_path / "p"),
                       "--", "vllm", "bench", "serve", "--max-concurrency", "100", "--request-rate", "2")
    assert code == 0, text
    r = pd.read_csv(tmp_path / "p" / "plan.csv").iloc[0]
    back_to_back = pd.read_csv(plan_dir / "plan.csv").iloc[0]
    assert r["clients"] == 100 and r["validated"] and r["slo_pass"]
    assert r["replicas"] == 1 < back_to_back["replicas"]
    assert "at most 2.00 req/s" in (tmp_path / "p" / "plan.md").read_text() or "req/s (--request-rate)" in \
        (tmp_path / "p" / "plan.md").read_text()


def test_rows_left_unvalidated_by_choice_do_not_blame_the_api_server(tmp_path: Path) -> None:
    """Only the best knobs per GPU x TP are replayed; without API servers, the others must not
    say that API servers kept them from validation."""
    code, text = kvsim("plan", str(BUNDLED), "--max-concurrency", "16", *SLO, *FAST, "--api-server-count", "0",
                       "--max-num-seqs", "8,64", "--out", str(tmp_path / "p"))
    assert code == 0, text
    t = pd.read_csv(tmp_path / "p" / "plan.csv")
    assert len(t) == 2 and t["validated"].sum() == 1
    assert not t["note"].fillna("").str.contains("API servers").any()
