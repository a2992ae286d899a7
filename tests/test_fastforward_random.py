"""Fast-forward is bit-identical to ``--exact-steps`` on random configurations, too: a seeded
draw of block size, token budget, batch cap, KV pool, sync/async, prefix caching, long-prefill
threshold, priority scheduling, swap or CPU offload or a slab, over slices of the bundled Azure
and Mooncake traces at several loads (fast-forward runs with the allocator's invariants checked
after every window)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conftest import make_trace
from tests.helpers import BUNDLED, assert_fast_forward_identical, mooncake_slice

CASES = 6


def draw(seed: int) -> tuple[dict[str, Any], Any]:
    from workloads import load_trace

    rng = np.random.default_rng([seed, 19])
    n = int(rng.integers(60, 160))
    if rng.random() < 0.3:
        df = mooncake_slice(n).df.copy()
    else:
        base = load_trace(BUNDLED).df
        df = base.sample(n, random_state=int(rng.integers(2**31))).sort_values("arrival_s").copy()
        df["arrival_s"] = (df["arrival_s"] - df["arrival_s"].iloc[0]) / float(rng.choice([1.0, 3.0, 8.0]))
    B = int(rng.choice([8, 16, 32]))
    kw: dict[str, Any] = dict(max_model_len=8192, block_size=B, max_num_batched_tokens=int(rng.choice([256, 512, 2048])),
                              max_num_seqs=int(rng.choice([16, 32, 64])), async_scheduling=bool(rng.random() < 0.6),
                              enable_prefix_caching=bool(rng.random() < 0.8),
                              num_gpu_blocks=max(int(rng.choice([800, 1500, 4000])), 8192 // B + 50))
    if rng.random() < 0.3:
        kw["long_prefill_token_threshold"] = int(rng.choice([64, 128, 512]))
    if rng.random() < 0.2:
        kw["policy"] = "priority"
        df["priority"] = np.arange(len(df)) % 3
    u = rng.random()
    if u < 0.15:
        kw["preemption"] = "swap"
    elif u < 0.3:
        kw.update(kv_offloading_size=0.05, enable_prefix_caching=True)
    elif u < 0.4:
        kw.update(allocator="slab", kv_memory="2GiB")
        del kw["num_gpu_blocks"], kw["block_size"]
    return kw, make_trace(df.to_dict("records"))


@pytest.mark.parametrize("seed", range(CASES))
def test_fast_forward_is_bit_identical_on_a_random_configuration(seed: int) -> None:
    kw, trace = draw(seed)
    assert_fast_forward_identical(kw, trace, check=True)


@pytest.mark.parametrize("seed", range(100, 100 + CASES))
def test_a_random_fleet_behind_least_outstanding_tokens_is_bit_identical(seed: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Three replicas of a random configuration behind the totals-only router, with array runs
    forced down to 2 steps: lazy reads (sim/engine/fastforward/pause.py) equal ``--exact-steps``."""
    import sim.engine.fastforward.runs as runs
    from tests.test_router_live import both

    monkeypatch.setattr(runs, "MIN_RUN", 2)
    kw, trace = draw(seed)
    both(kw, trace, "least-outstanding-tokens")
