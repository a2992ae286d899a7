"""Binding-constraint labels (sim/fleet/binding.py): one hand-made case per label, and real
runs that push one limit at a time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.config.schema import make_config
from sim.fleet.binding import BINDINGS, LABELS, Diagnostics, classify, diagnose
from sim.fleet.workload import to_trace
from sim.run.simulate import simulate

TTFT, TPOT = ("ttft_p99<=1s",), ("tpot_p99<=0.05s",)


def steps(n: int, *, waiting: int, running: int, free: int, pool: int = 100, prefill: int = 10,
          decode: int = 0) -> pd.DataFrame:
    return pd.DataFrame({
        "duration_s": np.full(n, 0.01), "num_waiting": waiting, "num_running": running,
        "prefill_tokens": prefill, "decode_tokens": decode, "token_state_slots": pool - free,
        "reserved_slots": 0, "internal_frag_slots": 0, "external_frag_slots": 0, "free_slots": free})


def requests(wait_s: float, prefill_s: float, n: int = 20) -> pd.DataFrame:
    """``n`` requests that each wait ``wait_s`` to be scheduled, then take ``prefill_s`` to a token."""
    arr = np.arange(n, dtype=float)
    return pd.DataFrame({"arrival_s": arr, "first_scheduled_s": arr + wait_s,
                         "first_token_s": arr + wait_s + prefill_s})


FREE = dict(free=50)   # a pool with room
CASES = {
    "kv-memory": (steps(10, waiting=3, running=5, free=1), 256, TTFT, None),
    "seq-cap": (steps(10, waiting=3, running=8, **FREE), 8, TTFT, None),
    "prefill-interference": (steps(10, waiting=0, running=8, prefill=100, decode=7, **FREE), 256, TPOT, None),
    "decode-steps": (steps(10, waiting=0, running=8, prefill=0, decode=8, **FREE), 256, TPOT, None),
    "token-budget": (steps(10, waiting=2, running=8, prefill=8192, **FREE), 256, TTFT, None),
    "prefill-compute": (steps(10, waiting=0, running=1, prefill=512, **FREE), 256, TTFT, requests(0.01, 2.0)),
    "queueing": (steps(10, waiting=5, running=8, prefill=64, decode=7, **FREE), 256, TTFT, requests(3.0, 0.1)),
}


@pytest.mark.parametrize("label", BINDINGS)
def test_each_label_from_hand_made_records(label: str) -> None:
    st, max_seqs, failing, req = CASES[label]
    d = diagnose(st, 100, 0, max_seqs, 8192, failing, req)
    assert classify(d) == label
    assert LABELS[label][0] and LABELS[label][1]       # every label is defined and says what helps


def test_the_shares_behind_the_labels() -> None:
    assert diagnose(*CASES["kv-memory"][:1], 100, 0, 256, 8192, TTFT).kv_full_share == 1.0
    mixed = pd.concat([steps(3, waiting=0, running=4, prefill=100, decode=3, **FREE),
                       steps(1, waiting=0, running=4, prefill=0, decode=4, **FREE)])
    assert diagnose(mixed, 100, 0, 256, 8192, TPOT).prefill_step_share == pytest.approx(0.75)
    assert diagnose(mixed, 100, 0, 256, 8192, TTFT, requests(1.0, 3.0)).tail_wait_share == pytest.approx(0.25)
    assert classify(Diagnostics(0, 0, 0, 0, 12.0, ())) == "kv-memory"   # preemptions alone


def _run(**kw: object) -> Diagnostics:
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(1 / 50, n)),
                       "prompt_tokens": np.full(n, 512), "output_tokens": np.full(n, 128)})
    cfg = make_config(model="llama-3.1-8b", cost_model="constant:0.01", **kw)  # type: ignore[arg-type]
    res = simulate(cfg, to_trace(df))
    b = res.budget
    return diagnose(res.steps, n, res.summary.preemptions, b.max_num_seqs, b.max_num_batched_tokens,
                    ("ttft_p99<=0.5s",))


def test_small_kv_pool_binds_on_memory() -> None:
    d = _run(num_gpu_blocks=200, max_model_len=2048)   # ~5 requests' worth of KV
    assert classify(d) == "kv-memory"


def test_low_max_num_seqs_binds_on_the_batch_cap() -> None:
    d = _run(max_num_seqs=2)
    assert classify(d) == "seq-cap"


def _long_prompts(n: int, prompt: int, output: int, failing: str, **kw: object) -> tuple[pd.DataFrame, Diagnostics]:
    """One request a second, each ``prompt`` tokens long; ``failing``: the SLO target that failed.
    Returns the steps and the diagnostics."""
    df = pd.DataFrame({"arrival_s": np.arange(n, dtype=float), "prompt_tokens": np.full(n, prompt),
                       "output_tokens": np.full(n, output)})
    res = simulate(make_config(model="llama-3.1-8b", max_num_seqs=64, **kw), to_trace(df))  # type: ignore[arg-type]  # (make_config validates the keys)
    b = res.budget
    return res.steps, diagnose(res.steps, n, 0, b.max_num_seqs, b.max_num_batched_tokens, (failing,), res.requests)


def test_long_prompts_at_low_load_bind_on_prefill_compute() -> None:
    """8,000-token prompts in 512-token chunks at 10 ms a step: 16 steps (160 ms) of prefill
    each, at one request per second: nothing waits, the prompts themselves miss a 0.1 s TTFT."""
    _, d = _long_prompts(30, 8000, 4, "ttft_p99<=0.1s", cost_model="constant:0.01", max_num_batched_tokens=512,
                         max_model_len=16384)
    assert d.tail_wait_share < 0.1 and classify(d) == "prefill-compute"


def test_long_prompts_stalling_decodes_bind_on_prefill_interference() -> None:
    """16k-token prompts in 8,192-token chunks beside running decodes (roofline step times): a
    decode that shares its step with a chunk waits for it (~0.2 s against ~9 ms), so a large part
    of TPOT is chunks although most steps and most of the time are pure decode (the old rule,
    time in mixed steps >= 50 %, said `decode-steps`); the label names the chunk size."""
    st, d = _long_prompts(40, 16000, 300, "tpot_p99<=0.012s", cost_model="roofline", max_num_batched_tokens=8192,
                          max_model_len=20000)
    pure = float((st["prefill_tokens"] == 0).mean())
    assert pure > 0.5 and d.prefill_step_share < 0.5 and d.prefill_tpot_share > 1 / 3
    assert classify(d) == "prefill-interference"
    assert "max-num-batched-tokens" in LABELS["prefill-interference"][1]
