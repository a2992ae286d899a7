"""Issue 50, routers that use the fleet: the default kv-aware profile (llm-d's, with its load
terms) spreads the bundled Mooncake slice over 8 replicas and still beats round-robin's hit
rate; prefix-affinity hashes enough of the prompt and falls back to load; a cluster run warns
about a replica its router leaves idle (sim/cluster/balance.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sim.cluster.balance import balance_warnings, instance_loads
from sim.cluster.disagg import run_cluster
from sim.cluster.replay import replay_fleet
from sim.cluster.spec import parse_cluster
from sim.cluster.whatif import tally
from sim.config.schema import make_config
from tests.conftest import make_trace
from workloads import load_trace

MOONCAKE = Path(__file__).resolve().parents[1] / "workloads" / "data" / "mooncake_conv_slice.jsonl"


@pytest.fixture(scope="module")
def mooncake():  # type: ignore[no-untyped-def]
    return load_trace(MOONCAKE)


def shares_and_hit(trace, router: str) -> tuple[pd.Series, float]:  # type: ignore[no-untyped-def]
    per, fleet = tally(replay_fleet([make_config()] * 8, trace, router))
    return per["requests"] / per["requests"].sum(), fleet.hit_rate


def test_default_kv_aware_uses_every_replica_and_beats_round_robins_hit_rate(mooncake) -> None:  # type: ignore[no-untyped-def]
    share, hit = shares_and_hit(mooncake, "kv-aware")
    _, rr_hit = shares_and_hit(mooncake, "round-robin")
    assert len(share) == 8 and share.min() >= 0.04
    assert hit >= rr_hit
    old, _ = shares_and_hit(mooncake, "kv-aware:kv=0")   # the profile without its load terms starves some
    assert old.min() < 0.04


def test_prefix_affinity_tells_mooncake_prompts_apart(mooncake) -> None:  # type: ignore[no-untyped-def]
    """Every Mooncake prompt starts with the same hash block: one block would send all to one replica."""
    share, _ = shares_and_hit(mooncake, "prefix-affinity")
    assert share.min() >= 0.04
    one_block, _ = shares_and_hit(mooncake, "prefix-affinity:tokens=1,queue=1000000")
    assert one_block.max() == 1.0


def same_prefix(n: int = 40, gap: float = 0.05) -> list[dict[str, object]]:
    """``n`` requests sharing a 256-token prefix (then their own 64 tokens), ``gap`` s apart."""
    return [{"arrival_s": i * gap, "prompt_tokens": 320, "output_tokens": 50,
             "prompt_token_ids": [*range(256), *range(1000 + 64 * i, 1064 + 64 * i)]} for i in range(n)]


CFG: dict[str, Any] = {"cost_model": "constant:0.01", "num_gpu_blocks": 600, "max_model_len": 512, "max_num_seqs": 2}


def test_prefix_affinity_falls_back_to_load_when_its_replica_queues() -> None:
    tr = make_trace(same_prefix())
    stuck = replay_fleet([make_config(**CFG)] * 4, tr, "prefix-affinity:tokens=256,queue=1000000").requests
    spread = replay_fleet([make_config(**CFG)] * 4, tr, "prefix-affinity:tokens=256").requests
    assert stuck["replica"].nunique() == 1
    assert spread["replica"].nunique() == 4
    assert spread["ttft_s"].quantile(0.9) < stuck["ttft_s"].quantile(0.9)


def test_prefix_affinity_fast_forward_is_bit_identical_to_exact_steps() -> None:
    tr = make_trace(same_prefix())
    ff = replay_fleet([make_config(**CFG)] * 4, tr, "prefix-affinity:tokens=256,queue=2").requests
    ex = replay_fleet([make_config(**CFG, exact_steps=True)] * 4, tr, "prefix-affinity:tokens=256,queue=2").requests
    pd.testing.assert_frame_equal(ff, ex)


def cluster_warnings(router: str) -> list[str]:
    spec = parse_cluster({"router": router, "instances": [{"name": "r", "count": 4}]}, "test", CFG)
    res = run_cluster(spec, make_trace(same_prefix()))
    return balance_warnings(instance_loads(res.requests, res.steps, res.names, res.roles, res.end_s))


def test_a_replica_the_router_leaves_idle_is_named() -> None:
    """Prefix scores alone (no load term) pull every request to the replica holding the prefix."""
    warned = cluster_warnings("kv-aware:prefix=3,queue=0,kv=0")
    idle = [w for w in warned if "of its fair share" in w]
    assert len(idle) == 3 and all("received 0 requests" in w for w in idle)
    assert any("queued up to" in w for w in warned)
    assert cluster_warnings("round-robin") == []


def test_router_options_land_on_their_own_router() -> None:
    from sim.cluster.router import parse_router

    assert dict(parse_router("kv-aware:queue=5").weights)["queue"] == 5.0
    pa = parse_router("prefix-affinity:tokens=512,queue=7")
    assert (pa.affinity_tokens, pa.affinity_queue, pa.static) == (512, 7, False)
