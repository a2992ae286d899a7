"""CPU KV offload tier (--kv-offloading-size; sim/kv/cpu_tier.py, sim/kv/offload.py).

vLLM 0.33's native backend: every block a request fills is written through to a CPU LRU; a
request whose prefix misses on the GPU continues its hit in the CPU tier and those blocks are
loaded back over PCIe (kvsim charges the load to the admitting step as swap-in blocks). The tier
is a KV connector (sim/kv/connector.py) behind the paged allocator's prefix cache.
"""

from __future__ import annotations

import pandas as pd
import pytest

from sim.config.schema import make_config
from sim.cost import StepBatch
from sim.errors import ConfigError
from sim.kv.cpu_tier import CpuTier
from sim.kv.offload import OffloadConnector
from sim.kv.paged import PagedAllocator
from sim.request import Request
from sim.run.simulate import simulate
from tests.conftest import make_trace
from tests.helpers import req as _req


def req(uid: int, prompt: int, base: int = 0, out: int = 2) -> Request:
    return _req(uid, prompt, out, base=base)


def offloaded(num_blocks: int, block_size: int, cpu_blocks: int) -> tuple[PagedAllocator, OffloadConnector]:
    kv = PagedAllocator(num_blocks, block_size)
    c = OffloadConnector(kv, cpu_blocks)
    kv.connect(c)
    return kv, c


# ---- the CPU LRU (vllm/v1/kv_offload/cpu/manager.py, policies/lru.py) ---------------------------
def test_touch_makes_the_first_block_of_a_prefix_most_recent() -> None:
    cpu = CpuTier(4)
    assert cpu.store([1, 2, 3]) == 3
    cpu.touch([1, 2, 3])
    assert list(cpu.blocks) == [3, 2, 1]           # a prefix is evicted from its tail
    assert cpu.lookup([1, 2, 9, 3]) == 2            # consecutive from the first
    assert cpu.store([1, 4]) == 1                   # 1 is stored already
    assert list(cpu.blocks) == [3, 2, 1, 4]


def test_a_store_evicts_least_recent_others_or_changes_nothing() -> None:
    cpu = CpuTier(3)
    cpu.store([1, 2, 3])
    assert cpu.store([2, 7]) == 1                   # evicts 1 (least recent), never 2 (in the store)
    assert list(cpu.blocks) == [2, 3, 7] and cpu.evictions == 1
    assert cpu.store([8, 9, 10, 11]) is None        # more than the tier holds: no change
    assert list(cpu.blocks) == [2, 3, 7] and cpu.failed_stores == 1


# ---- the connector behind the paged allocator --------------------------------------------------
def test_gpu_eviction_then_cpu_hit_loads_into_fresh_blocks() -> None:
    """A's 3 full blocks are written through; B's prompt evicts them from the GPU; C (A's prompt)
    misses on the GPU and loads them from the CPU tier: 3 fresh blocks + 1 for its last tokens."""
    kv, off = offloaded(9, 4, cpu_blocks=6)         # 8 usable GPU blocks of 4 tokens
    a = req(0, 13)
    assert kv.allocate(a, 13)
    assert off.cpu.stored_blocks == 3 and off.offered[a.uid] == 3
    kv.free(a)
    b = req(1, 32, base=1000)                       # 8 blocks: evicts a's cached blocks on the GPU
    assert kv.allocate(b, 32) and kv.evictions == 3
    assert off.cpu.failed_stores == 1               # 8 new blocks > a CPU tier of 6: not stored
    kv.free(b)
    c = req(2, 13)
    hits = kv.get_computed_blocks(c)
    assert hits == []                               # nothing on the GPU
    assert off.get_num_new_matched_tokens(c, 0) == (12, False)  # capped at 12 of 13 tokens: CPU
    assert kv.blocks_needed(c, 13, hits) == 4 and kv.can_allocate(c, 1 + 12, hits) == 4
    assert kv.allocate(c, 1 + 12, hits)
    off.update_state_after_alloc(c, kv.num_held_blocks(c), 12)
    assert off.loaded_blocks == 3 and off.hit_tokens == 12 and len(c.kv.blocks) == 4
    assert off.offered[c.uid] == 3                  # the loaded blocks are not stored again
    kv.check([c])
    assert off.request_finished(c, 4) == (False, None) and c.uid not in off.offered


def test_gpu_hits_come_first_and_the_cpu_continues_them() -> None:
    kv, off = offloaded(12, 4, cpu_blocks=16)
    a = req(0, 17)
    assert kv.allocate(a, 17)
    blocks = list(a.kv.blocks)
    kv.free(a)
    for j in (2, 3):                                # drop blocks 2, 3 from the GPU cache only
        del kv.pool.cache[a.kv.hashes[j]]
        kv.pool.block_hash[blocks[j]] = None
    b = req(1, 17)
    assert kv.get_computed_blocks(b) == [blocks[0], blocks[1]]
    assert off.get_num_new_matched_tokens(b, 2 * 4) == (2 * 4, False)   # blocks 2, 3 from the CPU


def test_cpu_hits_stop_below_the_last_token_too() -> None:
    """vLLM loads every full block and recomputes only the last token; kvsim keeps the GPU
    rule's cap (num_tokens - 1 in whole blocks) for both tiers."""
    kv, off = offloaded(20, 4, cpu_blocks=16)
    a = req(0, 8)
    assert kv.allocate(a, 8)                        # 2 full blocks, on the GPU and in the CPU tier
    blocks = list(a.kv.blocks)
    kv.free(a)
    del kv.pool.cache[a.kv.hashes[0]]
    kv.pool.block_hash[blocks[0]] = None
    b = req(1, 8)
    assert kv.get_computed_blocks(b) == []
    assert off.get_num_new_matched_tokens(b, 0) == (4, False)    # block 1 would reach token 7


# ---- whole runs -------------------------------------------------------------------------------
def shared_rows(n: int, gap: float) -> list[dict]:
    """``n`` requests with one 480-token prompt (30 blocks), ``gap`` seconds apart, and between
    them unrelated 940-token fillers that take the whole 60-block GPU pool, evicting the prefix."""
    rows = []
    for i in range(n):
        rows.append({"arrival_s": i * gap, "prompt_tokens": 480, "output_tokens": 8,
                     "prompt_token_ids": list(range(480))})
        rows.append({"arrival_s": i * gap + gap / 2, "prompt_tokens": 940, "output_tokens": 8,
                     "prompt_token_ids": list(range(10_000 * (i + 1), 10_000 * (i + 1) + 940))})
    return rows


KW = dict(num_gpu_blocks=61, max_model_len=960, cost_model="roofline")   # llama-3.1-8b: 2 MiB blocks


def test_cpu_tier_turns_gpu_misses_into_hits_and_charges_the_load() -> None:
    tr = make_trace(shared_rows(4, 5.0))
    plain = simulate(make_config(**KW), tr, check=True)
    off = simulate(make_config(kv_offloading_size=0.2, **KW), tr, check=True)   # 102 CPU blocks
    shared = off.requests.iloc[::2]
    assert plain.requests.iloc[::2]["prefix_hit_tokens"].tolist() == [0, 0, 0, 0]   # evicted each time
    assert shared["prefix_hit_tokens"].tolist() == [0, 464, 464, 464]              # 29 blocks from the CPU
    o = off.summary.kv_offload
    assert (o.cpu_hits, o.gpu_hits, o.loaded_blocks) == (3 * 464, 0, 3 * 29)
    assert o.cpu_hit_rate == pytest.approx(o.cpu_hits / off.summary.prefix_cache.queries)
    assert off.summary.prefix_cache.hits == o.gpu_hits + o.cpu_hits
    # the admitting steps move the loaded blocks over PCIe, and that time is in the step
    loads = off.steps[off.steps["swap_in_blocks"] > 0]
    assert loads["swap_in_blocks"].tolist() == [29, 29, 29]
    cost = off.summary.cost_model
    assert "roofline" in cost
    from sim.cost.roofline import RooflineCost
    from sim.model.catalog import resolve_gpu, resolve_model
    rc = RooflineCost(resolve_model("llama-3.1-8b"), resolve_gpu("h100"))
    bb = off.summary.budget["bytes_per_block"]
    with_load = rc.step_time(StepBatch(prefill_tokens=16, num_prefill_seqs=1, block_size=16,
                                       swap_in_blocks=29, block_bytes=bb))
    without = rc.step_time(StepBatch(prefill_tokens=16, num_prefill_seqs=1, block_size=16, block_bytes=bb))
    assert with_load - without == pytest.approx(29 * 1e-5 + 29 * bb / (rc.gpu.pcie_gbps * 1e9))
    # fewer prompt tokens computed than without the tier
    assert off.steps["prefill_tokens"].sum() == plain.steps["prefill_tokens"].sum() - 3 * 464


def test_offload_summary_is_zero_without_the_flag() -> None:
    res = simulate(make_config(**KW), make_trace(shared_rows(1, 1.0)))
    assert res.summary.kv_offload.cpu_blocks == 0
    flat = res.summary.flat()
    assert flat["offload_cpu_hits"] == 0 and "offload_gpu_hit_rate" in flat


OFFLOAD_CONFIGS = [
    {"num_gpu_blocks": 900, "max_model_len": 8192, "kv_offloading_size": 0.5},    # preemption-heavy
    {"num_gpu_blocks": 400, "block_size": 8, "max_model_len": 3192, "kv_offloading_size": 0.05},
    {"num_gpu_blocks": 900, "max_model_len": 8192, "kv_offloading_size": 0.5, "async_scheduling": False},
]


@pytest.mark.parametrize("kw", OFFLOAD_CONFIGS)
def test_fast_forward_is_bit_identical_with_the_cpu_tier(bundled_trace, kw) -> None:
    ff = simulate(make_config(exact_steps=False, **kw), bundled_trace, check=True)
    ex = simulate(make_config(exact_steps=True, **kw), bundled_trace, check=True)
    assert ff.summary.fast_forward_steps > 0
    assert ff.summary.kv_offload.loaded_blocks > 0          # resumed requests load their own blocks
    pd.testing.assert_frame_equal(ff.requests, ex.requests, check_exact=True)
    pd.testing.assert_frame_equal(ff.steps, ex.steps, check_exact=True)
    assert ff.summary.kv_offload == ex.summary.kv_offload


@pytest.mark.parametrize("extra, match", [(dict(enable_prefix_caching=False), "enable-prefix-caching"),
                                          (dict(kv_offloading_size=1e-9), "smaller than one KV block"),
                                          (dict(allocator="slab", kv_memory="1GiB"), "paged")])
def test_bad_offload_configs_are_one_line_errors(extra, match) -> None:
    kw = {"kv_offloading_size": 1.0, "max_model_len": 960, **extra}
    with pytest.raises(ConfigError, match=match):
        simulate(make_config(**kw), make_trace(shared_rows(1, 1.0)))


def test_cli_flag_reports_the_tiers(tmp_path) -> None:
    import json
    import subprocess
    import sys

    def kvsim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sim.cli.main", *args], capture_output=True, text=True,
                              timeout=300)

    p = kvsim("simulate", "--out", str(tmp_path / "run"), "--num-gpu-blocks", "900", "--max-model-len", "8192",
              "--kv-offloading-size", "0.5", "--cost-model", "constant:0.01")
    assert p.returncode == 0, p.stderr
    assert "of which GPU / CPU tier" in p.stdout
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["kv_offload"]["cpu_blocks"] == 256            # 0.5 GiB / 2 MiB blocks (llama-3.1-8b, B 16)
    assert s["config"]["kv_offloading_size"] == 0.5
    bad = kvsim("simulate", "--out", str(tmp_path / "bad"), "--kv-offloading-size", "1", "--no-enable-prefix-caching")
    assert bad.returncode != 0 and "--kv-offloading-size" in bad.stderr and "Traceback" not in bad.stderr


def test_fast_forward_identical_with_shared_prefixes_on_mooncake() -> None:
    """Mooncake conversations share prompt prefixes (hash_ids): CPU hits across requests, not only
    a resumed request's own blocks; fast-forward still equals --exact-steps."""
    from tests.helpers import mooncake_slice

    tr = mooncake_slice(80, 8000)
    kw = dict(gpu="h200", num_gpu_blocks=700, max_model_len=8192, kv_offloading_size=32.0)
    ff = simulate(make_config(**kw), tr, check=True)
    ex = simulate(make_config(exact_steps=True, **kw), tr)
    assert ff.summary.kv_offload.cpu_hits > 0 and ff.summary.fast_forward_steps > 0
    pd.testing.assert_frame_equal(ff.steps, ex.steps, check_exact=True)
    pd.testing.assert_frame_equal(ff.requests, ex.requests, check_exact=True)
