"""paper-v0 mode (vllm-v1-semantics.md s9): stack free list, prefill-only steps, fork + copy-on-write
for parallel sampling, beam re-forks -- and the V1 fan-out it is compared with."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.run.build import build
from sim.run.simulate import simulate
from tests.conftest import make_trace


def v0(rows, **kw):
    kw = {"preset": "paper-v0", "num_gpu_blocks": 200, "block_size": 8, "max_model_len": 512,
          "cost_model": "constant:0.1", **kw}
    return simulate(make_config(**kw), make_trace(rows), check=True)


def test_parallel_samples_share_every_prompt_block_by_reference() -> None:
    """n=3 of a 30-token prompt (B=8): 4 prompt blocks allocated once with ref count 3."""
    res = v0([{"arrival_s": 0.0, "prompt_tokens": 30, "output_tokens": 5, "n": 3}])
    s0 = res.steps.iloc[0]
    assert s0.prefill_tokens == 30           # the prompt is computed once for the group
    assert s0.shared_blocks_saved == 4 * 2   # 4 blocks, 2 extra references each
    assert s0.free_blocks == 200 - 4


def test_first_decode_copies_the_shared_partial_block_on_write() -> None:
    """The prompt ends inside block 3: two of the three samples copy it, the last writes in place."""
    res = v0([{"arrival_s": 0.0, "prompt_tokens": 30, "output_tokens": 3, "n": 3}])
    s1 = res.steps.iloc[1]
    assert s1.shared_blocks_saved == 3 * 2   # the 3 full blocks stay shared
    assert s1.free_blocks == 200 - 4 - 2     # 2 copies
    assert (res.requests["status"] == "finished").all()


def test_prompt_on_a_block_boundary_needs_no_copy() -> None:
    res = v0([{"arrival_s": 0.0, "prompt_tokens": 32, "output_tokens": 3, "n": 3}])
    s1 = res.steps.iloc[1]
    assert s1.shared_blocks_saved == 4 * 2
    assert s1.free_blocks == 200 - 4 - 3     # each sample opens its own new block


def test_beam_search_reforks_conserve_blocks_and_are_seeded() -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 21, "output_tokens": 30, "beam_width": 4}]
    a = v0(rows, seed=1)
    b = v0(rows, seed=1)
    c = v0(rows, seed=2)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert not a.steps["free_blocks"].equals(c.steps["free_blocks"])  # the rng drives re-forks
    assert a.summary.sharing_saved_fraction > 0.3
    assert (a.requests["status"] == "finished").all()


def test_sharing_saves_memory_against_no_sharing() -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 200, "output_tokens": 20, "n": 4}]
    shared = v0(rows)
    alone = v0([{**rows[0], "n": 1, "request_id": str(k)} for k in range(4)])
    used = lambda r: (200 - r.steps["free_blocks"]).mean()  # noqa: E731
    assert used(shared) < 0.5 * used(alone)


def test_v0_steps_are_prefill_only() -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 20},
            {"arrival_s": 0.35, "prompt_tokens": 10, "output_tokens": 5}]
    res = v0(rows)
    mixed = res.steps[(res.steps["prefill_tokens"] > 0) & (res.steps["decode_tokens"] > 0)]
    assert mixed.empty


def test_fork_mode_needs_the_paper_preset_switches() -> None:
    with pytest.raises(ConfigError, match="fork-cow"):
        build(make_config(sharing="fork-cow", num_gpu_blocks=100, max_model_len=512))
