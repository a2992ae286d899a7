"""Fleet prefix what-if (sim/cluster/whatif.py): floor <= routed fleet <= ceiling, and the
ceiling is the hand-countable shared cache."""

from __future__ import annotations

import pytest

from sim.cluster.whatif import prefix_whatif, shared_cache_hits
from sim.config.schema import make_config
from tests.conftest import make_trace
from tests.helpers import mooncake_slice

CFG = dict(gpu="h200", num_gpu_blocks=600, max_model_len=8192, async_scheduling=False)


def test_shared_cache_ceiling_counts_blocks_by_hand() -> None:
    """Three 64-token prompts (4 blocks of 16) with one content, then a different one: the
    first misses, the next two hit 3 blocks each (a lookup stops one token short of the
    prompt), the fourth misses. With room for 4 blocks, the fourth's 4 evict all of the first's,
    and the fifth (the first again) misses and evicts the fourth's."""
    same = list(range(64))
    rows = [{"arrival_s": float(i), "prompt_tokens": 64, "output_tokens": 2, "prompt_token_ids": ids}
            for i, ids in enumerate([same, same, same, list(range(100, 164))])]
    t = shared_cache_hits(make_trace(rows), make_config(), None)
    assert (t.prompt_tokens, t.hit_tokens) == (256, 2 * 48)
    small = shared_cache_hits(make_trace([*rows, {**rows[0], "arrival_s": 9.0}]), make_config(), 4)
    assert small.hit_tokens == 2 * 48         # the fifth (same again) was evicted by the fourth
    assert small.evictions == 8               # 4 by the fourth prompt, 4 by the fifth


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding-tokens", "prefix-affinity", "kv-aware"])
def test_floor_le_policy_le_ceiling_on_the_mooncake_slice(router: str) -> None:
    w = prefix_whatif([make_config(**CFG)] * 3, mooncake_slice(150), router)
    assert w.floor.hit_tokens == 0
    assert w.floor.hit_tokens <= w.fleet.hit_tokens <= w.ceiling.hit_tokens <= w.unbounded.hit_tokens
    assert 0.0 <= w.recovered <= 1.0
    assert int(w.per_replica["hit_tokens"].sum()) == w.fleet.hit_tokens
    assert len(w.per_replica) == 3


def sessions(convs: int = 13, turns: int = 5) -> object:
    """Multi-turn chats: turn t of conversation c re-sends the conversation so far (256 + 128 t
    tokens of its own content); conversations interleave, one turn every 0.3 s."""
    rows = []
    for t in range(turns):
        for c in range(convs):
            n = 256 + 128 * t
            rows.append({"arrival_s": 0.3 * (t * convs + c), "prompt_tokens": n, "output_tokens": 16,
                         "prompt_token_ids": list(range(c * 10_000, c * 10_000 + n))})
    return make_trace(rows)


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding-tokens", "kv-aware", "dynamo"])
def test_floor_le_policy_le_ceiling_on_chat_sessions(router: str) -> None:
    w = prefix_whatif([make_config(**CFG)] * 3, sessions(), router)
    assert w.floor.hit_tokens <= w.fleet.hit_tokens <= w.ceiling.hit_tokens


def test_kv_aware_routing_recovers_more_of_the_ceiling_than_round_robin() -> None:
    """Round-robin scatters a conversation's turns over the replicas (13 conversations, 3
    replicas: turn t of conversation c lands on (13 t + c) mod 3 = (t + c) mod 3, never twice in
    a row); the precise prefix scorer sends each turn where the conversation is cached."""
    rr = prefix_whatif([make_config(**CFG)] * 3, sessions(), "round-robin")
    kv = prefix_whatif([make_config(**CFG)] * 3, sessions(), "kv-aware")
    assert rr.ceiling == kv.ceiling                    # a property of the trace and the fleet size
    assert kv.fleet.hit_tokens > rr.fleet.hit_tokens
    assert kv.recovered > 0.9 > rr.recovered
