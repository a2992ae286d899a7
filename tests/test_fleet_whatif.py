"""Issue 50, point 7: the fleet prefix what-if reachable from the CLI (`kvsim trace prefix`) and
Python (sim.cluster.whatif.fleet_prefix_bounds): floor <= per-replica LRU <= one shared LRU of
the fleet's size <= unbounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim.cluster.whatif import fleet_prefix_bounds, shared_cache_hits
from sim.config.schema import make_config
from sim.errors import ConfigError
from tests.conftest import make_trace
from tests.helpers import mooncake_slice

cli_main._load()
MOONCAKE = Path(__file__).resolve().parents[1] / "workloads" / "data" / "mooncake_conv_slice.jsonl"


def test_the_command_orders_the_four_bounds_on_mooncake() -> None:
    res = CliRunner().invoke(cli_main.app, ["trace", "prefix", str(MOONCAKE), "--replicas", "8",
                                            "--cache-tokens", "200000", "--json"])
    assert res.exit_code == 0, res.output
    b = json.loads(res.output)
    hits = [b[k]["hit_tokens"] for k in ("floor", "per_replica", "shared", "unbounded")]
    assert hits[0] == 0 < hits[1] < hits[2] < hits[3]
    assert len({b[k]["prompt_tokens"] for k in b}) == 1


def test_the_table_names_each_bound(tmp_path: Path) -> None:
    head = tmp_path / "head.jsonl"
    head.write_text("".join(MOONCAKE.read_text().splitlines(keepends=True)[:100]))
    res = CliRunner().invoke(cli_main.app, ["trace", "prefix", str(head), "--cache-tokens", "100000",
                                            "--replicas", "4", "--route", "prefix-affinity"])
    assert res.exit_code == 0, res.output
    for needle in ("floor (no reuse)", "per-replica LRU (prefix-affinity)", "one shared LRU (400,000 tokens)",
                   "unbounded"):
        assert needle in res.output


def test_one_replica_is_the_shared_cache_and_affinity_keeps_conversations_together() -> None:
    tr = mooncake_slice(200)
    one = fleet_prefix_bounds(tr, 1, 50_000)
    assert one.per_replica == one.shared
    rr = fleet_prefix_bounds(tr, 4, 50_000)
    aff = fleet_prefix_bounds(tr, 4, 50_000, route="prefix-affinity")
    assert rr.per_replica.hit_tokens < aff.per_replica.hit_tokens <= aff.unbounded.hit_tokens
    assert rr.shared == aff.shared == shared_cache_hits(tr, make_config(), 4 * 50_000 // 16)


def test_a_repeated_prompt_hits_in_every_bound_but_the_floor() -> None:
    """Four 65-token copies: each later one hits its 4 full blocks (vLLM keeps the last token to compute)."""
    rows = [{"arrival_s": float(i), "prompt_tokens": 65, "output_tokens": 1,
             "prompt_token_ids": list(range(65))} for i in range(4)]
    b = fleet_prefix_bounds(make_trace(rows), 1, 1024)
    assert (b.floor.hit_tokens, b.per_replica.hit_tokens, b.shared.hit_tokens, b.unbounded.hit_tokens) == (0, 192, 192, 192)


def test_bad_arguments_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="--route 'hash'"):
        fleet_prefix_bounds(mooncake_slice(10), 2, 1000, route="hash")
    with pytest.raises(ConfigError, match="--replicas 0"):
        fleet_prefix_bounds(mooncake_slice(10), 0, 1000)
