"""KV-aware routing (sim/cluster/scorers.py, view.py): the router's view of each cache decides
where a shared-prefix request goes; a stale or approximate view misses what it cannot see."""

from __future__ import annotations

from typing import Any

import pytest

from sim.cluster.replay import replay_fleet
from sim.cluster.router import RouterSpec, parse_router
from sim.config.schema import make_config
from sim.errors import ConfigError
from tests.conftest import make_trace

CFG = dict(cost_model="constant:0.01", num_gpu_blocks=400, max_model_len=2048, async_scheduling=False)
PREFIX = list(range(1000, 1256))  # 256 tokens = 16 blocks of 16


def planted(b_arrival: float = 1.0) -> Any:
    """A (shared prefix, long output: still decoding when B arrives) at t=0; B with the same
    prefix at ``b_arrival``; both replicas idle but A's."""
    rows = [{"arrival_s": 0.0, "prompt_tokens": 272, "output_tokens": 400, "prompt_token_ids": PREFIX + list(range(16))},
            {"arrival_s": b_arrival, "prompt_tokens": 272, "output_tokens": 4,
             "prompt_token_ids": PREFIX + list(range(50, 66))}]
    return make_trace(rows)


def route(router: str, trace: Any) -> Any:
    return replay_fleet([make_config(**CFG)] * 2, trace, router).requests


def test_precise_view_sends_the_shared_prefix_request_to_the_replica_holding_it() -> None:
    """Prefix weight 3 against load weight 1: the holder is busier (A decodes there), but 16 of
    B's 16 shareable blocks are cached there, so it wins 3 x 1 + 0 > 0 + 1."""
    req = route("kv-aware:prefix=3,queue=0,load=1", planted())
    a, b = req.iloc[0], req.iloc[1]
    assert b.replica == a.replica
    assert b.prefix_hit_tokens == 256                 # the engine found the 16 blocks there


def test_a_stale_view_misses_the_prefix_and_balances_load_instead() -> None:
    """Same case with the KV events 5 s late: at t=1 the router has seen nothing of A's blocks,
    so the prefix scores tie at 0 and the load scorer sends B to the idle replica (a miss)."""
    req = route("kv-aware:prefix=3,queue=0,load=1,delay=5", planted())
    a, b = req.iloc[0], req.iloc[1]
    assert b.replica != a.replica
    assert b.prefix_hit_tokens == 0


def test_a_stale_view_catches_up_once_the_delay_has_passed() -> None:
    req = route("kv-aware:prefix=3,queue=0,load=1,delay=0.5", planted(b_arrival=1.0))
    assert req.iloc[1].replica == req.iloc[0].replica


def test_the_approximate_view_learns_from_routing_history_alone() -> None:
    """No KV events: the router remembers it sent A's prompt blocks to A's replica."""
    req = route("kv-aware:prefix=3,queue=0,load=1,view=approximate", planted())
    assert req.iloc[1].replica == req.iloc[0].replica


def test_dynamo_cost_weighs_overlap_against_active_blocks() -> None:
    """cost = w x prefill blocks + active blocks. At t=1, A's replica holds A (272 + 99 tokens
    -> 24 blocks): holder 1 x (272 - 256)/16 + 24 + 17 = 42, idle 17 + 0 + 17 = 34: the idle
    one wins at w=1; at w=4 the overlap wins: 4 + 41 = 45 < 68 + 17 = 85."""
    a1 = route("dynamo:overlap=1", planted())
    assert a1.iloc[1].replica != a1.iloc[0].replica
    a4 = route("dynamo:overlap=4", planted())
    assert a4.iloc[1].replica == a4.iloc[0].replica


@pytest.mark.parametrize("text, match", [
    ("kv-awar", "expected one of"), ("kv-aware:prefx=1", "unknown option 'prefx'"),
    ("kv-aware:view=exact", "view 'exact'"), ("dynamo:overlap=-1", "must be >= 0"),
    ("kv-aware:delay=soon", "not a number"), ("round-robin:x=1", "takes none")])
def test_bad_router_specs_are_one_line_errors(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_router(text)


def test_router_spec_defaults_are_llm_d_profile() -> None:
    spec = parse_router("kv-aware")
    assert dict(spec.weights) == {"prefix": 3.0, "queue": 2.0, "kv": 2.0, "load": 0.0}
    assert (spec.view, spec.delay_s, spec.static) == ("precise", 0.0, False)
    assert parse_router("round-robin") == RouterSpec("round-robin")
