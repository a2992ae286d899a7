"""Disaggregated prefill/decode, hand-computed (sim/cluster/disagg.py, pd.py, links.py).

Every instance costs 0.1 s a step (``constant:0.1``). Llama-3.1-8B's KV is 128 KiB a token,
2 MiB (2,097,152 B) a 16-token block; a link of 2.097152 GB/s moves a block in 1 ms.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.cluster.disagg import run_cluster
from sim.cluster.spec import parse_cluster
from sim.errors import ConfigError
from tests.conftest import make_trace

STEP = 0.1
BLOCK_S = 0.001  # one 2 MiB block over 2.097152 GB/s


def cluster(*, latency_us: float = 0.0, decode: dict[str, Any] | None = None, tp: int = 1,
            flow: str = "decode-first", threshold: int = 0, n_prefill: int = 1,
            prefill: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "flow": flow, "threshold": threshold,
        "defaults": {"model": "llama-3.1-8b", "gpu": "h100", "cost_model": f"constant:{STEP}",
                     "async_scheduling": False, "max_model_len": 2048, "api_server_count": 0},
        "instances": [
            {"name": "p", "role": "prefill", "count": n_prefill,
             "config": {"num_gpu_blocks": 400, "tensor_parallel_size": tp, **(prefill or {})}},
            {"name": "d", "role": "decode", "config": {"num_gpu_blocks": 400, "tensor_parallel_size": tp,
                                                          **(decode or {})}}],
        "links": {"default": {"kind": "rdma-ndr", "bandwidth_gbps": 2.097152, "latency_us": latency_us}},
    }


def rows(n: int, prompt: int = 160, out: int = 4, gap: float = 0.0) -> Any:
    return make_trace([{"arrival_s": gap * i, "prompt_tokens": prompt, "output_tokens": out} for i in range(n)])


def test_one_request_ttft_is_prefill_plus_transfer_plus_first_decode_step() -> None:
    """160-token prompt: the decode side takes 159 tokens (vLLM recomputes the last) into
    10 blocks -> 10 x 2 MiB over the link: 5 ms latency + 10 ms. TTFT = 0.1 + 0.005 + 0.010 + 0.1."""
    res = run_cluster(parse_cluster(cluster(latency_us=5000)), rows(1))
    r = res.requests.iloc[0]
    assert r.status == "finished"
    assert (r.prefill_instance, r.instance) == (0, 1)
    assert r.prefill_done_s == pytest.approx(STEP)
    assert r.transfer_s == pytest.approx(0.005 + 10 * BLOCK_S, abs=1e-12)
    assert r.kv_wait_s == pytest.approx(r.transfer_s, abs=1e-12)    # blocks were free at once
    assert r.ttft_s == pytest.approx(STEP + 0.005 + 10 * BLOCK_S + STEP, abs=1e-12)
    assert r.finish_s == pytest.approx(r.ttft_s + 3 * STEP, abs=1e-12)  # 3 more decode steps
    link = res.links[(0, 1)]
    assert link.bytes_moved == pytest.approx(10 * 2_097_152)
    held = [b for _, b in res.receiving[1]]
    assert max(held) == 10 and held[-1] == 0     # 10 blocks held while receiving, then none
    assert (res.steps["receiving_slots"] == 0).all()  # no decode step ran while it was receiving


def test_blocks_held_while_receiving_are_their_own_memory_category() -> None:
    """b arrives 0.25 s after a: while b's 10 blocks are in flight (5 s latency), a's decode steps
    record them as receiving (160 slots), part of the held-but-not-computed slots."""
    res = run_cluster(parse_cluster(cluster(latency_us=5e6)), rows(2, out=40, gap=STEP / 2 * 5))
    d = res.steps[res.steps["instance"] == 1]
    during = d[d["receiving_slots"] > 0]
    assert len(during) > 0 and (during["receiving_slots"] == 160).all()
    assert (during["internal_frag_slots"] >= during["receiving_slots"]).all()


def test_two_concurrent_transfers_on_one_link_each_take_twice_as_long() -> None:
    alone = run_cluster(parse_cluster(cluster()), rows(1)).requests.iloc[0].transfer_s
    both = run_cluster(parse_cluster(cluster()), rows(2)).requests
    assert alone == pytest.approx(10 * BLOCK_S, abs=1e-12)
    assert both["transfer_s"].tolist() == pytest.approx([2 * alone, 2 * alone], abs=1e-12)


def test_tp_ranks_move_their_shards_in_parallel() -> None:
    """TP 2 on both sides: the same bytes (KV heads split over 2 ranks) over 2 lanes: half the time."""
    r = run_cluster(parse_cluster(cluster(tp=2)), rows(1)).requests.iloc[0]
    assert r.transfer_s == pytest.approx(5 * BLOCK_S, abs=1e-12)


def test_a_full_decode_pool_holds_the_request_waiting_for_kv_and_counts_it() -> None:
    """The decode pool (11 usable blocks) holds one 160 + 4 token request: the second waits for
    its blocks until the first finishes, then pulls -- its kv_wait_s is longer than its transfer."""
    spec = parse_cluster(cluster(decode={"num_gpu_blocks": 12, "max_model_len": 176}))
    res = run_cluster(spec, rows(2))
    a, b = res.requests.iloc[0], res.requests.iloc[1]
    assert (a.status, b.status) == ("finished", "finished")
    assert res.decode_kv_blocked == 1
    assert b.kv_wait_s > b.transfer_s + 3 * STEP                    # waited for a's 4 decode steps
    assert b.kv_wait_s == pytest.approx(a.finish_s - a.prefill_done_s + b.transfer_s, abs=1e-12)


def test_llm_d_threshold_prefills_short_uncached_prompts_on_the_decode_instance() -> None:
    res = run_cluster(parse_cluster(cluster(threshold=200)), rows(1))
    r = res.requests.iloc[0]
    assert (r.prefill_instance, r.instance) == (-1, 1)
    assert r.ttft_s == pytest.approx(STEP)                           # one local prefill step


def test_prefill_first_picks_the_decode_instance_when_the_prefill_is_done() -> None:
    res = run_cluster(parse_cluster(cluster(flow="prefill-first", n_prefill=2)), rows(4, gap=0.01))
    req = res.requests
    assert (req["status"] == "finished").all()
    assert set(req["prefill_instance"]) == {0, 1} and set(req["instance"]) == {2}
    assert res.steps.groupby("instance").size().to_dict().keys() == {0, 1, 2}


def test_a_request_the_decode_instance_cannot_hold_is_rejected_and_frees_the_prefill_side() -> None:
    """A 300-token prompt fits the prefill instance but not a decode max_model_len of 256: rejected
    with the decode side's reason; the prefill instance gets its blocks back and serves the next."""
    spec = parse_cluster(cluster(decode={"max_model_len": 256}))
    trace = make_trace([{"arrival_s": 0.0, "prompt_tokens": 300, "output_tokens": 4},
                        {"arrival_s": 1.0, "prompt_tokens": 100, "output_tokens": 4}])
    req = run_cluster(spec, trace).requests
    assert req["status"].tolist() == ["rejected", "finished"]
    assert req.iloc[0].reject_reason == "max_model_len"


@pytest.mark.parametrize("patch, match", [
    (lambda c: c["instances"][0].update(role="prefil"), "unknown role 'prefil'"),
    (lambda c: c["links"].update(pairs=[{"between": ["p", "x"], "kind": "nvlink4"}]), "link to nowhere"),
    (lambda c: c["instances"][1]["config"].update(num_gpu_blocks=8, max_model_len=120),
     "decode instance d: .*needs 8 blocks but the KV pool has 7"),
    (lambda c: c["links"]["default"].update(kind="carrier-pigeon"), "link kind 'carrier-pigeon'"),
    (lambda c: c.update(flow="sideways"), "flow 'sideways'"),
    (lambda c: c["instances"].pop(), "need decode instances"),
])
def test_bad_cluster_files_are_one_line_errors(patch: Any, match: str) -> None:
    c = cluster()
    patch(c)
    with pytest.raises(ConfigError, match=match) as e:
        run_cluster(parse_cluster(c), rows(1))
    assert "\n" not in str(e.value)
