"""Hybrid KV-cache groups (sim/kv/coordinator.py): vLLM 0.33's hybrid manager on small cases.

Sliding-window and chunked-local groups share one block pool with full-attention groups; blocks
a window skips go back to the pool and their table entries become the null block; prefix hits
follow each group's rule. Hand-computed cases first, then whole runs of the catalog's hybrid
models with the invariants checked after every step.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.io.results import MEM_CATS
from sim.kv.coordinator import HybridAllocator
from sim.kv.window import NULL, KvGroup, chunked_hit, full_hit, skipped_tokens, sliding_hit
from sim.request import Request
from sim.run.simulate import simulate
from sim.sched.admission import Admission
from tests.conftest import make_trace
from tests.helpers import req as _req

SW8 = KvGroup("sliding_window", 8, 0)       # window 8 tokens; with B = 4: 2 blocks
FULL = KvGroup("full")


def req(uid: int, prompt: int, out: int = 4, content: int | None = 0) -> Request:
    """Content ids ``content ..`` by default (None: no content), so prompts share prefixes."""
    return _req(uid, prompt, out, base=content)


def step(kv: HybridAllocator, r: Request, n: int, hits: list[int] | None = None) -> None:
    """Allocate ``n`` tokens (adopting ``hits``) and compute them, as one engine step does."""
    hits = hits or []
    assert kv.allocate(r, n, hits)
    r.num_computed_tokens += len(hits) * kv.block_size + n
    if r.num_computed_tokens == r.num_tokens:
        r.num_tokens += 1
        r.num_output += 1


def tables(r: Request) -> list[list[int]]:
    return [list(t.blocks) for t in r.kv.tables]


# ---- the per-kind rules (vllm/v1/core/single_type_kv_cache_manager.py docstrings) -------------
def test_skipped_tokens_follow_vllm_examples() -> None:
    assert skipped_tokens(KvGroup("sliding_window", 4), 7) == 4     # window of token 7 is 4..7
    assert skipped_tokens(KvGroup("sliding_window", 4), 2) == 0
    chunk = KvGroup("chunked_local", 8)
    assert [skipped_tokens(chunk, c) for c in (13, 8, 7)] == [8, 8, 0]
    assert skipped_tokens(FULL, 10_000) == 0


def test_sliding_hit_keeps_the_last_run_long_enough_for_the_window() -> None:
    cached = {2: 8, 3: 3, 5: 9}              # [miss, miss, 8, 3, miss, 9], window 8 -> 2 blocks

    def lookup(j: int) -> list[int] | None:
        return [cached[j]] if j in cached else None

    assert sliding_hit(lookup, 6, 1, window=8, B=4) == [[NULL, NULL, 8, 3]]
    assert sliding_hit(lookup, 2, 1, window=8, B=4) == [[]]
    # no run of 2 anywhere, but a run reaching block 0 counts even if shorter
    assert sliding_hit(lambda j: [5] if j == 0 else None, 4, 1, window=8, B=4) == [[5]]
    assert full_hit(lookup, 6, 1) == [[]]


def test_chunked_hit_nulls_before_the_current_chunk() -> None:
    lookup = {2: [30], 3: [40]}.get
    assert chunked_hit(lookup, 15, 1, chunk=8, B=4) == [[NULL, NULL, 30]]   # vLLM example 1
    assert chunked_hit(lookup, 16, 1, chunk=8, B=4) == [[NULL] * 4]         # vLLM example 2


# ---- allocation, release, free order ---------------------------------------------------------
def test_decode_releases_sliding_blocks_as_the_window_passes() -> None:
    """Window 8, B = 4: the block of tokens 0-3 is released once token 11 is next (skipped 4),
    the block of tokens 4-7 once token 15 is next; the full group keeps every block."""
    kv = HybridAllocator(21, 4, [SW8, FULL])
    r = req(0, 10, out=8)
    step(kv, r, 10)                                  # prefill: 3 blocks per group
    assert tables(r) == [[1, 2, 3], [4, 5, 6]]
    free0 = kv.num_free_blocks
    step(kv, r, 1)                                   # token 10: skipped(10) = 3 -> nothing
    assert tables(r)[0] == [1, 2, 3]
    step(kv, r, 1)                                   # token 11: skipped(11) = 4 -> block 0 released
    assert tables(r) == [[NULL, 2, 3], [4, 5, 6]] and kv.num_free_blocks == free0 + 1
    step(kv, r, 1)                                   # token 12: a new block in each group
    assert tables(r) == [[NULL, 2, 3, 7], [4, 5, 6, 8]]  # block 1 went to the tail (cached)
    for _ in range(3):
        step(kv, r, 1)                               # tokens 13-15: skipped(15) = 8 -> block 1 out
    assert tables(r)[0] == [NULL, NULL, 3, 7]
    kv.check([r])


def test_free_goes_group_by_group_tail_first() -> None:
    """vLLM: each manager frees its table reversed; unhashed blocks to the front, hashed to the tail."""
    kv = HybridAllocator(13, 4, [SW8, FULL])
    r = req(0, 10)
    step(kv, r, 10)                                  # groups: [1, 2, 3] and [4, 5, 6]; 3 and 6 partial
    kv.free(r)
    assert kv.pool.free_queue.to_list() == [6, 3, 7, 8, 9, 10, 11, 12, 2, 1, 5, 4]
    kv.check([])


def test_failed_allocation_still_releases_the_skipped_blocks() -> None:
    """allocate_slots frees blocks outside the window before it finds the pool too small."""
    kv = HybridAllocator(8, 4, [SW8, FULL])          # 7 usable
    r = req(0, 12, out=8)
    step(kv, r, 12)                                  # 3 + 3 blocks, 1 free
    before = kv.num_free_blocks
    assert not kv.allocate(r, 9)                     # skipped(12) = 5: block 0 goes; 6 more needed
    assert tables(r)[0][0] == NULL and kv.num_free_blocks == before + 1
    kv.check([r])


def test_prefix_hit_is_full_attention_cut_to_the_sliding_rule() -> None:
    """Two requests with the same 14-token prompt, window 8, B = 4: the hit is capped at 13
    tokens -> 3 blocks; the sliding group needs only the last 2 of them (block 0 is null)."""
    kv = HybridAllocator(41, 4, [SW8, FULL])
    a = req(0, 14)
    step(kv, a, 14)
    b = req(1, 14)
    hits = kv.get_computed_blocks(b)
    assert len(hits) == 3 and hits.groups == [[NULL, 2, 3], [5, 6, 7]]
    # full-sequence check: 1 more block per group, the hit blocks are held by a (ref 1): none free
    assert kv.blocks_needed(b, 14, hits) == 2
    step(kv, b, 2, hits)
    assert tables(b) == [[NULL, 2, 3, 9], [5, 6, 7, 10]] and b.kv.nulls == 1
    kv.check([a, b])


def test_evicted_sliding_tail_shortens_the_hit() -> None:
    """If the sliding group lost the blocks the window needs, the hit falls back to an earlier
    run of cached blocks, and the full-attention hit is cut to it."""
    kv = HybridAllocator(41, 4, [SW8, FULL])
    a = req(0, 20)
    step(kv, a, 20)                                  # 5 blocks per group
    key = kv.hasher.key(a, a.kv.tables[0], 3) * 2    # sliding group (0) entry of block 3
    del kv.pool.cache[key]                           # as if evicted
    kv.pool.block_hash[a.kv.tables[0].blocks[3]] = None
    b = req(1, 20)
    hits = kv.get_computed_blocks(b)                 # max 19 tokens -> 4 blocks; sliding needs 2 in a row
    assert len(hits) == 3 and hits.groups[0] == [NULL, 2, 3] and len(hits.groups[1]) == 3


def test_full_sequence_admission_caps_windowed_groups() -> None:
    """The full-sequence check counts a windowed group at most ``admission_cap`` blocks; chunked
    prefill then keeps the sliding group's real blocks under that cap."""
    cap = -(-(8 - 1 + 8) // 4) + 1                   # window 8 + 8 tokens per step: 5 blocks
    kv = HybridAllocator(41, 4, [KvGroup("sliding_window", 8, cap), FULL])
    r = req(0, 40, out=1)
    assert kv.blocks_needed(r, 40) == 10 + cap
    while r.num_computed_tokens < 40:
        step(kv, r, 8)
        real = [b for b in r.kv.tables[0].blocks if b != NULL]
        assert len(real) <= cap
        kv.check([r])


def test_memory_categories_count_released_and_shared_blocks() -> None:
    kv = HybridAllocator(41, 4, [SW8, FULL])
    a = req(0, 14)
    step(kv, a, 14)
    step(kv, a, 1)                                   # token 14: sliding block 0 released
    b = req(1, 14)
    hits = kv.get_computed_blocks(b)
    step(kv, b, 2, hits)
    mem = kv.breakdown([a, b], a.num_computed_tokens + b.num_computed_tokens)
    # held: sliding 2, 3, 4 (a), 9 (b); full 5, 6, 7, 8 (a), 10 (b) -> 9 blocks = 36 slots
    # tokens: sliding 4 + 4 + 3 + 2, full 12 + 3 + 2 = 30
    assert mem == (30, 0, 6, 4, (40 - 9) * 4)
    assert sum(mem) == kv.num_blocks * kv.block_size


GROUPS = st.lists(st.sampled_from([FULL, KvGroup("sliding_window", 4), SW8, KvGroup("sliding_window", 20),
                                   KvGroup("chunked_local", 8), KvGroup("chunked_local", 16)]),
                  min_size=1, max_size=4)
OPS = st.lists(st.tuples(st.sampled_from(["new", "append", "append", "free"]), st.integers(0, 10_000),
                         st.integers(1, 40)), min_size=1, max_size=60)


@settings(max_examples=120, deadline=None)
@given(groups=GROUPS, ops=OPS, B=st.sampled_from([1, 4]), N=st.integers(8, 60), caching=st.booleans())
def test_invariants_hold_after_every_operation(groups, ops, B, N, caching) -> None:
    """Random admissions (with prefix hits), decodes and frees; pool and tables stay consistent,
    the memory categories sum to the pool, and freeing everything gives every block back."""
    kv = HybridAllocator(N, B, groups, enable_caching=caching)
    live: list[Request] = []
    for uid, (op, pick, size) in enumerate(ops):
        if op == "new":
            r = req(uid, size, content=0 if pick % 2 else None)
            hits = kv.get_computed_blocks(r)
            if Admission(reserve_full_isl=True).admit(kv, r, r.num_tokens - len(hits) * B, hits, False):
                r.num_computed_tokens = r.num_tokens
                live.append(r)
            else:
                assert kv.num_held_blocks(r) == 0
        elif live and op == "append":
            r = live[pick % len(live)]
            r.num_tokens += 1
            if kv.allocate(r, 1):
                r.num_computed_tokens += 1
            else:
                r.num_tokens -= 1
        elif live:
            kv.free(live.pop(pick % len(live)))
        kv.check(live)
        mem = kv.breakdown(live, sum(r.num_computed_tokens for r in live))
        assert sum(mem) == N * B and min(mem) >= 0
    for r in live:
        kv.free(r)
    kv.check([])
    assert kv.num_free_blocks == N - 1


# ---- whole runs ---------------------------------------------------------------------------------
ROWS = [{"arrival_s": 0.0, "prompt_tokens": 300 + 97 * (i % 7), "output_tokens": 150 + 60 * (i % 5)}
        for i in range(40)]
MODELS = [dict(model="gpt-oss-20b", gpu="h100", num_gpu_blocks=300, max_model_len=2048),
          dict(model="gpt-oss-20b", gpu="h100", num_gpu_blocks=300, max_model_len=2048, async_scheduling=False),
          dict(model="gemma-3-27b", gpu="h200", num_gpu_blocks=1000, max_model_len=2048,
               max_num_batched_tokens=512, max_num_seqs=64),
          dict(model="llama-4-scout", gpu="h200", tensor_parallel_size=8, num_gpu_blocks=700,
               max_model_len=2048, max_num_batched_tokens=512, max_num_seqs=64)]


@pytest.mark.parametrize("kw", MODELS, ids=lambda kw: kw["model"] + ("-sync" if "async_scheduling" in kw else ""))
def test_hybrid_runs_keep_invariants_and_memory_sums(kw) -> None:
    """Allocator invariants after every step (check=True), memory categories summing to the pool."""
    res = simulate(make_config(cost_model="constant:0.01", **kw), make_trace(ROWS), check=True)
    steps = res.steps
    assert res.summary.budget["num_kv_cache_groups"] > 1
    assert (res.requests["status"] == "finished").all()
    assert steps[list(MEM_CATS)].sum(axis=1).eq(kw["num_gpu_blocks"] * 16).all()
    assert (steps[list(MEM_CATS)] >= 0).all().all()
    assert res.summary.preemptions > 0            # the pools are small on purpose
    assert res.summary.fast_forward_steps == 0    # fast-forward is off for windowed groups


@pytest.mark.parametrize("kw", MODELS[1:], ids=lambda kw: kw["model"])
def test_allocator_groups_match_the_budget(kw) -> None:
    """The allocator gets the budget's KV-cache groups and pool; a max_model_len request's blocks
    (windowed groups at their admission cap) are the budget's ``blocks_per_request``."""
    from sim.run.build import build

    parts = build(make_config(**kw))
    kv, budget = parts.kv, parts.budget
    assert isinstance(kv, HybridAllocator)
    assert len(kv.groups) == budget.num_kv_cache_groups and kv.num_blocks == budget.num_gpu_blocks
    full = -(-budget.max_model_len // budget.block_size)
    assert sum(g.admission_cap if g.windowed else full for g in kv.groups) == budget.blocks_per_request


def test_sliding_window_frees_memory_a_full_group_would_hold() -> None:
    """gpt-oss (window 128): same pool, same trace; the hybrid manager admits more at once than
    the same layers allocated as full attention (--disable-hybrid-kv-cache-manager)."""
    rows = [{"arrival_s": 0.0, "prompt_tokens": 1500, "output_tokens": 200} for _ in range(12)]
    kw = dict(model="gpt-oss-20b", gpu="h100", kv_memory="0.25GiB", max_model_len=2048, cost_model="constant:0.01")
    hybrid = simulate(make_config(**kw), make_trace(rows), check=True)
    full = simulate(make_config(disable_hybrid_kv_cache_manager=True, **kw), make_trace(rows))
    assert hybrid.summary.budget["num_kv_cache_groups"] == 2 and full.summary.budget["num_kv_cache_groups"] == 1
    # a block holds 12 layers (2 groups of 12) vs 24: twice the blocks, and the sliding group
    # keeps ~9 of them per request after the prefill instead of 94-107
    assert hybrid.summary.num_gpu_blocks == 2 * full.summary.num_gpu_blocks
    assert hybrid.steps["num_running"].max() > full.steps["num_running"].max()
    assert hybrid.summary.simulated_s < full.summary.simulated_s


def test_prefix_sharing_under_hybrid_groups() -> None:
    """Identical prompts arriving later hit the cache in both groups (shared prompt content)."""
    rows = [{"arrival_s": 1.0 * i, "prompt_tokens": 600, "output_tokens": 20, "prompt_token_ids": list(range(600))}
            for i in range(4)]
    res = simulate(make_config(model="gpt-oss-20b", gpu="h100", num_gpu_blocks=400, max_model_len=2048,
                               cost_model="constant:0.01"), make_trace(rows), check=True)
    assert res.requests["prefix_hit_tokens"].tolist() == [0, 592, 592, 592]


@pytest.mark.parametrize("extra", [dict(preemption="swap"), dict(preset="paper-v0"),
                                   dict(kv_offloading_size=1.0)])
def test_unsupported_combinations_are_one_line_errors(extra) -> None:
    with pytest.raises(ConfigError, match="sliding-window/chunked-local"):
        simulate(make_config(model="gpt-oss-20b", gpu="h100", num_gpu_blocks=400, max_model_len=2048, **extra),
                 make_trace(ROWS[:1]))
