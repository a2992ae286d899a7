"""Unpublished blocks (sim/kv/block_pool.py): a request without prompt content keeps its blocks
out of the prefix-cache map unless it is freed before it finishes. Nothing any caller sees may
change: the same hits, free blocks, evictions and block ids as publishing every block at once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.config import make_config
from sim.kv.block_pool import UNPUBLISHED
from sim.kv.paged import PagedAllocator
from sim.run.simulate import simulate
from tests.helpers import BUNDLED, drive_kv, req
from workloads import load_trace


def pools(num_blocks: int = 40, block_size: int = 4) -> tuple[PagedAllocator, PagedAllocator]:
    lazy, eager = PagedAllocator(num_blocks, block_size), PagedAllocator(num_blocks, block_size)
    eager.lazy_unique = False
    assert lazy.lazy_unique
    return lazy, eager


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_decide_alike_with_and_without_unpublished_blocks(seed: int) -> None:
    """The same random admits, growths, preemptions and finishes (30 % of the prompts without
    content, the rest sharing prefixes), with the invariants checked after every operation:
    every decision, hit, free count, eviction count and block id must be equal."""
    lazy, eager = pools()
    left_out: list[int] = []  # unpublished blocks of each table freed
    free = lazy.free

    def spy(r: Any) -> None:
        left_out.append(sum(lazy.pool.block_hash[b] is UNPUBLISHED for b in (r.kv.blocks if r.kv else ())))
        free(r)

    lazy.free = spy  # type: ignore[method-assign]
    blocks = lambda r: r.kv.blocks if r.kv is not None else ()  # noqa: E731
    a = drive_kv(lazy, np.random.default_rng(seed), 600, blocks_of=blocks)
    b = drive_kv(eager, np.random.default_rng(seed), 600, blocks_of=blocks)
    assert a == b
    assert any(op == "preempt" for op, *_ in a) and any(op == "admit" and out[1] > 0 for op, _, out, *_ in a)
    assert sum(left_out) > 0, "no block was left out of the map: the test proves nothing"


def test_a_finished_request_never_enters_the_map_and_a_preempted_one_finds_its_blocks() -> None:
    lazy, _ = pools(11, 4)
    r = req(0, 10, out=1)
    hits = lazy.get_computed_blocks(r)
    assert lazy.allocate(r, 10, hits)
    assert [lazy.pool.block_hash[b] for b in r.kv.blocks[:2]] == [UNPUBLISHED] * 2 and not lazy.pool.cache
    r.num_computed_tokens, r.num_output = 10, 0
    lazy.free(r)                                   # freed before its last token: a preemption
    assert len(lazy.pool.cache) == 2
    r.num_computed_tokens = 0
    assert lazy.get_computed_blocks(r) == [1, 2]   # its own two full blocks, as published at once
    s = req(1, 10, out=1)
    assert lazy.allocate(s, 10, lazy.get_computed_blocks(s))
    s.num_computed_tokens, s.num_output = 10, 1
    lazy.free(s)                                   # finished: its blocks stay hashed, unpublished
    assert len(lazy.pool.cache) == 2
    assert sum(h is UNPUBLISHED for h in lazy.pool.block_hash) == 2
    lazy.pool.check()


def test_a_request_never_given_blocks_here_probes_nothing_without_reading_the_map() -> None:
    """Its keys are its own (``unique_key(uid, j)``) and enter the map only through its own table,
    so a request without content that holds no table here has no hit, whatever the map holds
    (here: another request's published keys); one with a table is looked up."""
    lazy, _ = pools(11, 4)
    reads: list[int] = []

    class Reads(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            reads.append(key)
            return super().get(key, default)

    lazy.pool.cache = Reads()
    other = req(0, 10)
    assert lazy.allocate(other, 10)
    other.num_computed_tokens = 10
    lazy.free(other)  # a preemption: its two full blocks published
    assert len(lazy.pool.cache) == 2
    fresh = req(1, 10)
    assert lazy.get_computed_blocks(fresh) == [] and reads == []
    other.num_computed_tokens = 0
    assert lazy.get_computed_blocks(other) == [1, 2] and reads


@pytest.mark.parametrize("kw", [dict(num_gpu_blocks=900, max_model_len=8192),
                                dict(num_gpu_blocks=900, max_model_len=8192, async_scheduling=False)])
def test_a_preempting_run_is_bit_identical_with_and_without_unpublished_blocks(
        kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(**kw)
    trace = load_trace(BUNDLED)
    lazy = simulate(cfg, trace, check=True)
    init = PagedAllocator.__init__

    def eager_init(self: PagedAllocator, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        self.lazy_unique = False

    monkeypatch.setattr(PagedAllocator, "__init__", eager_init)
    eager = simulate(cfg, trace, check=True)
    assert lazy.summary.prefix_cache.preempted_hits > 0, "no own-block hit after a preemption: the test proves nothing"
    pd.testing.assert_frame_equal(lazy.requests, eager.requests, check_exact=True)
    pd.testing.assert_frame_equal(lazy.steps, eager.steps, check_exact=True)
    assert replace(lazy.summary, timings=eager.summary.timings) == eager.summary  # wall times aside
