"""Speculative decoding (``--num-speculative-tokens K``): lookahead slots, draft KV, acceptance.

vLLM 0.33's rules (sim/sched/spec_decode.py): a decoding request is scheduled ``1 + K`` tokens
(its drafts); ``allocate_slots`` also reserves ``num_lookahead_tokens`` = K for EAGLE/EAGLE-3/MTP
and 0 for ngram; ``a`` accepted drafts append ``a + 1`` tokens. The drafter's KV layer shrinks the
pool (sim/memory/draft_kv.py). Acceptance is kvsim's knob, drawn from the run's seeded Generator.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.io.results import MEM_CATS
from sim.kv.paged import PagedAllocator
from sim.request import Request
from sim.run.build import build
from sim.run.simulate import simulate
from sim.sched.scheduler import Scheduler
from sim.sched.spec_decode import SpecDecode
from tests.conftest import make_trace


def sched(method: str, k: int = 2, alpha: float = 1.0, seed: int = 0) -> Scheduler:
    spec = SpecDecode(k, method, alpha, np.random.default_rng(seed))
    return Scheduler(PagedAllocator(64, 4, enable_caching=False), max_num_seqs=4, max_num_batched_tokens=64,
                     spec=spec, max_model_len=128)


def step(s: Scheduler, k: int) -> list[tuple[int, int]]:
    plan = s.schedule(float(k), k)
    s.finish(s.update(plan, float(k + 1), k), float(k + 1), k)
    s.kv.check(s.running)
    return [(r.uid, n) for r, n in plan.scheduled]


@pytest.mark.parametrize("method,blocks_after_first_decode", [("eagle", 3), ("mtp", 3), ("ngram", 2)])
def test_a_decode_takes_its_drafts_and_the_lookahead_slots(method: str, blocks_after_first_decode: int) -> None:
    """B = 4, K = 2. The 4-token prompt takes 1 block (a prefill has no drafts, and a new request
    no lookahead). The first decode is scheduled 1 + 2 tokens: slots 4 + 3 = 7 (2 blocks) for
    ngram, plus 2 lookahead slots = 9 (3 blocks) when the drafter reads ahead."""
    s = sched(method)
    r = Request(uid=0, request_id="0", arrival_s=0.0, prompt_tokens=4, output_tokens=20)
    s.add(r)
    assert step(s, 0) == [(0, 4)] and len(r.kv.blocks) == 1
    assert step(s, 1) == [(0, 3)]
    assert len(r.kv.blocks) == blocks_after_first_decode


@pytest.mark.parametrize("alpha,finish_step", [(1.0, 3), (0.0, 8)])
def test_accepted_drafts_set_the_tokens_per_step(alpha: float, finish_step: int) -> None:
    """9 output tokens, K = 2: the prefill samples 1; each decode yields accepted + 1. All accepted:
    3 + 3 + 2 (the last trimmed to the output length) -> done in step 3. None: 1 a step -> step 8."""
    s = sched("eagle", alpha=alpha)
    r = Request(uid=0, request_id="0", arrival_s=0.0, prompt_tokens=4, output_tokens=9)
    s.add(r)
    k = 0
    while r.finish_step < 0:
        step(s, k)
        k += 1
    assert r.finish_step == finish_step and r.num_output == 9
    assert s.spec is not None and s.spec.accepted == (s.spec.drafted if alpha else 0)


def test_acceptance_is_drawn_from_the_seeded_generator() -> None:
    def tokens_per_step(seed: int) -> list[int]:
        s = sched("eagle", k=3, alpha=0.5, seed=seed)
        r = Request(uid=0, request_id="0", arrival_s=0.0, prompt_tokens=4, output_tokens=40)
        s.add(r)
        out = []
        for k in range(8):
            before = r.num_output
            step(s, k)
            out.append(r.num_output - before)
        return out

    assert tokens_per_step(1) == tokens_per_step(1)
    assert tokens_per_step(1) != tokens_per_step(2)
    assert all(1 <= n <= 4 for n in tokens_per_step(1)[1:])


def test_the_draft_layer_shrinks_the_pool() -> None:
    """llama-3.1-8b, B = 16: a block is 32 layers x 16 tokens x 4096 B = 2,097,152 B; an EAGLE or MTP
    draft layer makes it 33 pages = 2,162,688 B, so 10 GiB holds 4,964 blocks instead of 5,120.
    ngram has no draft model and no KV."""
    kw = dict(kv_memory="10GiB", max_model_len=8192, async_scheduling=False, num_speculative_tokens=2)
    plain = build(make_config(kv_memory="10GiB", max_model_len=8192)).budget
    assert (plain.bytes_per_block, plain.num_gpu_blocks) == (2_097_152, 5120)
    for method in ("eagle", "eagle3", "mtp"):
        b = build(make_config(speculative_method=method, **kw)).budget
        assert (b.bytes_per_block, b.num_gpu_blocks) == (2_162_688, 10 * 2**30 // 2_162_688) == (2_162_688, 4964)
    assert build(make_config(speculative_method="ngram", **kw)).budget.num_gpu_blocks == 5120


def test_spec_decoding_run_memory_sums_to_the_pool_and_reserves_draft_slots(bundled_trace) -> None:
    kw = dict(num_gpu_blocks=900, max_model_len=8192, async_scheduling=False, num_speculative_tokens=3)
    spec = simulate(make_config(**kw), bundled_trace, check=True)
    plain = simulate(make_config(num_gpu_blocks=900, max_model_len=8192, async_scheduling=False), bundled_trace)
    total = spec.steps[list(MEM_CATS)].sum(axis=1)
    assert total.nunique() == 1 and (spec.steps[list(MEM_CATS)] >= 0).all().all()
    assert spec.steps["reserved_slots"].max() > 0 and plain.steps["reserved_slots"].max() == 0
    assert (spec.requests["status"] == "finished").all()
    assert len(spec.steps) < len(plain.steps)       # several tokens a step
    assert spec.summary.fast_forward_steps == 0     # decoders do not advance in lockstep
    again = simulate(make_config(**kw), bundled_trace)
    pd.testing.assert_frame_equal(spec.steps, again.steps, check_exact=True)


def test_unsupported_combinations_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="--no-async-scheduling"):
        build(make_config(num_gpu_blocks=300, max_model_len=2048, num_speculative_tokens=2))
    with pytest.raises(ConfigError, match="--allocator paged"):
        build(make_config(allocator="slab", kv_memory="4GiB", max_model_len=2048, async_scheduling=False,
                          num_speculative_tokens=2))
    with pytest.raises(ConfigError, match="paper-v0"):
        build(make_config(preset="paper-v0", num_gpu_blocks=300, max_model_len=2048, num_speculative_tokens=2))


def test_cli_flags(tmp_path) -> None:
    from typer.testing import CliRunner

    from sim.cli.main import _load, app

    _load(("sim.cli.simulate",))
    trace = tmp_path / "t.csv"
    make_trace([{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 6}]).df.to_csv(trace, index=False)
    res = CliRunner().invoke(app, ["simulate", str(trace), "--out", str(tmp_path / "o"), "--num-gpu-blocks", "300",
                                   "--max-model-len", "2048", "--no-async-scheduling", "--num-speculative-tokens", "2",
                                   "--speculative-method", "ngram", "--spec-acceptance-rate", "1.0",
                                   "--cost-model", "constant:0.1"])
    assert res.exit_code == 0, res.output
    req = pd.read_parquet(tmp_path / "o" / "requests.parquet")
    assert req["finish_step"].tolist() == [2]  # prefill: 1 token; then 3 + 2
