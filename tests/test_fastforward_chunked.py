"""Fast-forward carries a chunked prefill (sim/engine/fastforward/chunked.py): with a token
budget below the prompt lengths (vLLM's server default of 2048 on large GPUs) a prompt is
prefilled over several steps while the others decode, and the window goes on through those
steps instead of handing each one to the exact loop -- bit-identical to ``--exact-steps``."""

from __future__ import annotations

from typing import Any

import pytest

from sim.engine.fastforward.chunked import carried, next_chunk
from sim.engine.fastforward.ordering import SYNC
from tests.conftest import make_trace
from tests.helpers import BUNDLED, assert_fast_forward_identical, mooncake_slice, req


def azure(n: int = 300, speed: float = 4.0) -> Any:
    from workloads import load_trace

    df = load_trace(BUNDLED).df.head(n).copy()
    df["arrival_s"] = (df["arrival_s"] - df["arrival_s"].iloc[0]) / speed
    return make_trace(df.to_dict("records"))


CASES = [
    ("sync-512", {"async_scheduling": False, "max_num_batched_tokens": 512, "max_num_seqs": 64,
                  "num_gpu_blocks": 2000, "max_model_len": 8192}, azure, 0.95),
    ("async-512", {"max_num_batched_tokens": 512, "max_num_seqs": 64, "num_gpu_blocks": 2000, "max_model_len": 8192},
     azure, 0.95),
    ("async-tight-kv", {"max_num_batched_tokens": 1024, "num_gpu_blocks": 600, "max_model_len": 8192}, azure, 0.95),
    ("async-threshold", {"max_num_batched_tokens": 2048, "long_prefill_token_threshold": 256,
                         "num_gpu_blocks": 2000, "max_model_len": 8192}, azure, 0.85),
    ("mooncake-prefix", {"gpu": "h200", "max_num_batched_tokens": 1024, "num_gpu_blocks": 1500,
                         "max_model_len": 8192}, lambda: mooncake_slice(120), 0.95),
]


@pytest.mark.parametrize("name, cfg_kw, trace, share", CASES, ids=[c[0] for c in CASES])
def test_a_window_through_chunked_prefills_is_bit_identical(name: str, cfg_kw: dict[str, Any], trace: Any,
                                                            share: float) -> None:
    ff = assert_fast_forward_identical(cfg_kw, trace(), check=True)
    chunked = (ff.steps["prefill_tokens"] > 0) & (ff.steps["decode_tokens"] > 0)
    assert chunked.sum() > 20, "the case has no mixed prefill+decode steps: it proves nothing"
    # chunked steps are fast-forwarded too (when each ended the window: 86% of sync-512's steps,
    # 81% of async-threshold's; with a threshold two chunked prefills often run at once)
    assert ff.summary.fast_forward_steps > share * ff.summary.num_steps


def test_a_window_starts_with_decoders_and_at_most_one_chunked_prefill() -> None:
    d1, d2 = req(0, 10, 5), req(1, 10, 5)
    for d in (d1, d2):
        d.num_computed_tokens, d.num_tokens, d.num_output = 11, 12, 2  # decoding: one token to go
    p1, p2 = req(2, 100, 5), req(3, 100, 5)
    for p in (p1, p2):
        p.num_computed_tokens, p.num_tokens = 40, 100                 # mid-prefill
    assert carried([d1, d2], SYNC.decoding) == (True, None)
    assert carried([d1, p1, d2], SYNC.decoding) == (True, p1)
    assert carried([d1, p1, p2], SYNC.decoding) == (False, None)


def test_the_chunk_is_the_running_pass_budget_after_the_decoders() -> None:
    """The chunk after ``decoders`` decodes is what Scheduler.schedule gives; a decoder after the
    prefill in running order, or blocks it cannot get without preempting, end the window."""
    from sim.config import make_config
    from sim.run.build import build

    parts = build(make_config(max_num_batched_tokens=64, max_num_seqs=8, num_gpu_blocks=40, block_size=16,
                              max_model_len=512))
    sched = parts.sched
    p = req(0, 200, 3)
    sched.add(p)
    plan = sched.schedule(0.0, 0)
    assert plan.scheduled == [(p, 64)]
    p.advance(64, 0.1)
    assert next_chunk(sched, p, [], decoders=10, max_batched=64, reserve=0) == 54
    assert next_chunk(sched, p, [], decoders=64, max_batched=64, reserve=0) == 0       # no budget left
    free = sched.kv.num_free_blocks
    assert next_chunk(sched, p, [], decoders=0, max_batched=64, reserve=free) == 0     # no blocks left
    d = req(1, 10, 5)
    sched.running.append(d)
    assert next_chunk(sched, p, [], decoders=1, max_batched=64, reserve=0) == 0        # a decoder after it
    assert next_chunk(sched, p, [d], decoders=1, max_batched=64, reserve=0) == 63      # ... unless skipped
