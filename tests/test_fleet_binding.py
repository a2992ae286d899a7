"""Binding-constraint labels, from hand-made step records and from real runs that push one
limit at a time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.config import make_config
from sim.fleet.binding import Diagnostics, classify, diagnose
from sim.fleet.workload import to_trace
from sim.run import simulate


def steps(n: int, *, waiting: int, running: int, free: int, pool: int = 100, tokens: int = 10) -> pd.DataFrame:
    return pd.DataFrame({
        "duration_s": np.full(n, 0.01), "num_waiting": waiting, "num_running": running,
        "prefill_tokens": tokens, "decode_tokens": 0, "token_state_slots": pool - free,
        "reserved_slots": 0, "internal_frag_slots": 0, "external_frag_slots": 0, "free_slots": free})


def test_labels_from_hand_made_records() -> None:
    kv = diagnose(steps(10, waiting=3, running=5, free=1), 100, 0, 256, 8192, ("ttft_p99<=1s",))
    assert kv.kv_full_share == 1.0 and classify(kv) == "kv-memory"
    cap = diagnose(steps(10, waiting=3, running=8, free=50), 100, 0, 8, 8192, ("ttft_p99<=1s",))
    assert cap.seq_cap_share == 1.0 and classify(cap) == "max_num_seqs"
    dec = diagnose(steps(10, waiting=0, running=8, free=50), 100, 0, 256, 8192, ("tpot_p99<=0.05s",))
    assert classify(dec) == "decode-compute"
    pre = diagnose(steps(10, waiting=2, running=8, free=50, tokens=8192), 100, 0, 256, 8192, ("ttft_p99<=1s",))
    assert pre.token_cap_share == 1.0 and classify(pre) == "prefill-queueing"
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
    assert classify(d) == "max_num_seqs"
