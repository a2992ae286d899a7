"""The paged allocator against vllm-v1-semantics.md's verified examples and the seed's pictures."""

from __future__ import annotations

from sim.config.schema import make_config
from sim.kv.paged import PagedAllocator
from sim.request import Request
from sim.run.simulate import simulate
from sim.sched.admission import Admission
from tests.conftest import make_trace
from tests.helpers import req


def admit(pool: PagedAllocator, r: Request) -> int:
    """Probe, allocate the whole prompt, mark it computed; return hit tokens."""
    hits = pool.get_computed_blocks(r)
    hit_tokens = len(hits) * pool.block_size
    assert Admission(reserve_full_isl=True).admit(pool, r, r.num_tokens - hit_tokens, hits, has_running=False)
    r.num_computed_tokens = r.num_tokens
    return hit_tokens


def test_free_queue_after_one_free_is_3_4_to_10_2_1() -> None:
    """s3.3: N=11, B=4; a 10-token prompt gets [1,2,3]; freeing puts the partial block first."""
    pool = PagedAllocator(11, 4)
    r = req(0, 10)
    admit(pool, r)
    assert r.kv.blocks == [1, 2, 3]
    pool.free(r)
    assert pool.pool.free_queue.to_list() == [3, 4, 5, 6, 7, 8, 9, 10, 2, 1]
    pool.check([])


def test_legacy_switch_appends_everything_to_the_tail() -> None:
    pool = PagedAllocator(11, 4, free_order="tail")
    r = req(0, 10)
    admit(pool, r)
    pool.free(r)
    assert pool.pool.free_queue.to_list() == [4, 5, 6, 7, 8, 9, 10, 3, 2, 1]


def test_paper_v0_stack_hands_out_the_last_block_first_and_reuses_the_last_freed() -> None:
    pool = PagedAllocator(8, 4, null_block=False, free_order="stack", enable_caching=False)
    r = req(0, 9)
    admit(pool, r)
    assert r.kv.blocks == [7, 6, 5]
    pool.free(r)
    s = req(1, 4)
    admit(pool, s)
    assert s.kv.blocks == [5]


def test_null_block_is_never_handed_out() -> None:
    pool = PagedAllocator(5, 4)
    r = req(0, 16, out=1)
    admit(pool, r)
    assert 0 not in r.kv.blocks and pool.num_free_blocks == 0 and pool.usage == 1.0


def test_three_identical_50_token_prompts_in_one_step_hit_0_48_48() -> None:
    """s4.4: hashes are registered at schedule time, so a later request in the same step hits."""
    ids = tuple(range(50))
    trace = make_trace([{"arrival_s": 0.0, "prompt_tokens": 50, "output_tokens": 2,
                         "prompt_token_ids": list(ids)} for _ in range(3)])
    res = simulate(make_config(num_gpu_blocks=200, max_model_len=1024, cost_model="constant:0.01",
                                   api_server_count=0), trace, check=True)  # arriving at the engine together
    assert res.requests["prefix_hit_tokens"].tolist() == [0, 48, 48]
    assert (res.requests["first_scheduled_step"] == 0).all()


def test_a_fully_cached_48_token_prompt_hits_32() -> None:
    """s4.5: the hit is capped at num_tokens - 1 and rounded down to whole blocks."""
    pool = PagedAllocator(100, 16)
    ids = tuple(range(48))
    a = req(0, 48, ids=ids)
    assert admit(pool, a) == 0
    b = req(1, 48, ids=ids)
    assert admit(pool, b) == 32
    pool.check([a, b])


def test_a_hit_on_a_free_cached_block_unlinks_it_and_counts_against_capacity() -> None:
    pool = PagedAllocator(6, 4)  # 5 usable
    ids = tuple(range(12))
    a = req(0, 12, ids=ids)
    admit(pool, a)
    pool.free(a)  # blocks 1, 2 hashed -> tail; 3 hashed too (12 = 3 full blocks)
    b = req(1, 12, ids=ids)
    hits = pool.get_computed_blocks(b)
    assert len(hits) == 2  # capped at 11 tokens -> 2 blocks
    assert pool.can_allocate(b, 4, hits) == 1  # 1 new block; the 2 hits also leave the free queue
    assert pool.allocate(b, 4, hits)
    assert pool.num_free_blocks == 5 - 3
    pool.check([b])


def test_popping_a_cached_block_is_an_eviction() -> None:
    pool = PagedAllocator(4, 4)  # 3 usable
    a = req(0, 8, ids=tuple(range(8)))
    admit(pool, a)
    pool.free(a)
    assert pool.evictions == 0
    b = req(1, 12)
    admit(pool, b)
    assert pool.evictions == 2
    pool.check([b])


def test_a_request_without_content_hits_only_its_own_blocks_up_to_the_first_evicted() -> None:
    """s4: blocks of a prompt without content are unique to it; after a preemption (freed,
    hashes kept) its re-admission hits its own cached blocks in order, up to the first one
    popped by another request since."""
    pool = PagedAllocator(9, 4)  # 8 usable: 1..8
    a = req(0, 16)
    admit(pool, a)  # blocks 1 2 3 4, all full and hashed
    held = list(a.kv.blocks)
    pool.free(a)  # a preemption: back to the tail, last first (5 6 7 8 4 3 2 1), hashes kept
    other = req(1, 16)
    assert pool.get_computed_blocks(other) == []  # same length, no content: a's blocks are not its
    admit(pool, other)  # pops 5 6 7 8 (never hashed): nothing evicted
    assert pool.evictions == 0
    a.num_computed_tokens = 0
    assert pool.get_computed_blocks(a) == held[:3]  # capped at num_tokens - 1: 3 of 4 blocks
    pool.free(other)  # queue: 4 3 2 1 8 7 6 5
    b = req(2, 8)
    admit(pool, b)  # pops 4 and 3, a's last two blocks: evicted
    assert pool.evictions == 2
    assert pool.get_computed_blocks(a) == held[:2]  # the hit stops at the first evicted block
    pool.check([b])


def test_9_token_prompt_at_block_size_4_takes_3_blocks_the_third_a_quarter_full() -> None:
    pool = PagedAllocator(16, 4)
    r = req(0, 9)
    admit(pool, r)
    assert len(r.kv.blocks) == 3
    assert r.num_computed_tokens - 2 * 4 == 1  # 1 of 4 slots used in the third block


def test_token_37_is_logical_block_2_slot_5() -> None:
    B = 16
    assert divmod(37, B) == (2, 5)
    pool = PagedAllocator(16, B)
    r = req(0, 38)
    admit(pool, r)
    assert len(r.kv.blocks) == 3  # token 37 lives in the third logical block


def test_decode_needs_a_new_block_only_at_a_block_boundary() -> None:
    pool = PagedAllocator(16, 4)
    r = req(0, 8, out=10)
    admit(pool, r)
    r.num_output, r.num_tokens = 1, 9
    free = pool.num_free_blocks
    assert pool.allocate(r, 1)  # token 9 -> slot 0 of a 3rd block
    assert pool.num_free_blocks == free - 1
    r.num_computed_tokens, r.num_output, r.num_tokens = 9, 2, 10
    assert pool.allocate(r, 1) and pool.num_free_blocks == free - 1


def test_failed_allocation_changes_nothing() -> None:
    pool = PagedAllocator(4, 4)
    r = req(0, 20)
    before = pool.pool.free_queue.to_list()
    assert not pool.allocate(r, 20)
    assert pool.pool.free_queue.to_list() == before and pool.num_held_blocks(r) == 0
