"""The KV connector seam (sim/kv/connector.py, sim/sched/transfers.py): what the scheduler does
with external KV, specified with a small connector written here (remote KV that arrives later,
blocks held after finishing), as a disaggregated prefill/decode connector would behave."""

from __future__ import annotations

from typing import Any

from sim.kv.connector import ConnectorStats, KvConnector, PrefixHit, prefix_hit
from sim.kv.paged import PagedAllocator
from sim.request import Request, Status
from sim.sched.scheduler import Scheduler
from tests.helpers import req


class RemoteKv:
    """``tokens`` of every prompt are on another instance; a load started at admission arrives at
    ``arrives_s``; a finished request's blocks are sent until ``sent_s`` (then freed)."""

    asynchronous = True

    def __init__(self, kv: PagedAllocator, tokens: int, arrives_s: float, sent_s: float | None = None) -> None:
        self.kv, self.tokens, self.arrives_s, self.sent_s = kv, tokens, arrives_s, sent_s
        self.loading: set[int] = set()
        self.sending: set[int] = set()
        self.allocs: list[tuple[int, int, int]] = []
        self.saved: list[tuple[int, int, int]] = []

    def get_num_new_matched_tokens(self, req: Request, num_computed_tokens: int) -> tuple[int, bool]:
        if req.content is None:
            return 0, False                                  # only prompts with content are remote
        B = self.kv.block_size
        n = max(min(self.tokens, req.num_tokens - 1) // B * B - num_computed_tokens, 0)
        return n, n > 0

    def update_state_after_alloc(self, req: Request, blocks: int, num_external_tokens: int) -> None:
        self.allocs.append((req.uid, blocks, num_external_tokens))
        if num_external_tokens:
            self.loading.add(req.uid)

    def save_blocks(self, req: Request, start: int, stop: int) -> None:
        self.saved.append((req.uid, start, stop))

    def get_finished(self, now: float) -> tuple[set[int], set[int]]:
        recv = self.loading if now >= self.arrives_s else set()
        sent = self.sending if self.sent_s is not None and now >= self.sent_s else set()
        self.loading, self.sending = self.loading - recv, self.sending - sent
        return sent, recv

    def next_finished_s(self) -> float | None:
        return self.arrives_s if self.loading else self.sent_s if self.sending else None

    def request_finished(self, req: Request, blocks: int) -> tuple[bool, dict[str, Any] | None]:
        if self.sent_s is None:
            return False, None
        self.sending.add(req.uid)
        return True, {"blocks": blocks}

    def stats(self) -> ConnectorStats:
        return ConnectorStats()

    def check(self) -> None:
        return None


def setup(tokens: int = 16, arrives_s: float = 2.0, sent_s: float | None = None) -> tuple[
        PagedAllocator, RemoteKv, Scheduler]:
    kv = PagedAllocator(33, 4)                               # 32 usable blocks of 4 tokens
    conn = RemoteKv(kv, tokens, arrives_s, sent_s)
    c: KvConnector = conn                                    # the test connector honours the Protocol
    kv.connect(c)
    return kv, conn, Scheduler(kv, max_num_seqs=4, max_num_batched_tokens=64)


def test_prefix_hit_is_typed_and_sums_its_tiers() -> None:
    h = PrefixHit([5, 6], 20, 12, True)
    assert h.local_tokens == 8 and h.blocks == [5, 6] and h.load_async
    assert prefix_hit(([5, 6], 20, 12, True)) == h and type(prefix_hit(([], 0, 0, False))) is PrefixHit
    assert PrefixHit([], 0).tokens == 0 and not PrefixHit([], 0).load_async


def test_an_async_load_waits_holding_its_blocks_then_runs_from_the_loaded_tokens() -> None:
    kv, conn, sched = setup()
    r = req(0, 20, 2, base=0)
    sched.add(r)
    plan = sched.schedule(0.0, 0)
    assert plan.scheduled == [] and r.status is Status.WAITING_FOR_REMOTE_KVS
    assert kv.num_held_blocks(r) == 4 and r.num_computed_tokens == 16          # blocks for the load
    assert conn.allocs == [(0, 4, 16)] and sched.num_waiting == 1
    assert kv.pool.cache == {} and conn.saved == []          # nothing published before it arrives
    kv.check(sched.kv_holders())
    assert sched.schedule(1.0, 1).scheduled == []            # not yet arrived: passed over
    assert conn.next_finished_s() == 2.0 and sched.transfers.pending == 1
    plan = sched.schedule(2.0, 2)
    assert plan.scheduled == [(r, 4)] and r.status is Status.RUNNING
    assert r.num_computed_tokens == 16 and plan.swap_in_blocks == 0   # no step-time load term
    assert sched.transfers.pending == 0
    assert (0, 0, 4) in conn.saved and len(kv.pool.cache) == 5        # published on arrival (+ chunk)
    assert (sched.stats.queries, sched.stats.hits, r.prefix_hit_tokens) == (20, 16, 16)  # counted once
    kv.check(sched.kv_holders())


def test_a_waiting_load_keeps_its_place_and_does_not_block_the_queue() -> None:
    kv, conn, sched = setup()
    r0, r1, r2 = req(0, 20, base=0), req(1, 8), req(2, 8)    # r1, r2: no content, nothing remote
    conn.tokens = 16
    for r in (r0, r1, r2):
        sched.add(r)
    plan = sched.schedule(0.0, 0)
    assert [q.uid for q, _ in plan.scheduled] == [1, 2]      # admitted past the loading head
    assert list(sched.waiting) == [r0]
    kv.check(sched.kv_holders())                             # r0's blocks are held, and seen
    plan = sched.schedule(2.0, 1)
    assert [q.uid for q, _ in plan.scheduled] == [1, 2, 0]   # decodes, then the arrived request


def test_a_delayed_free_holds_the_blocks_until_sent() -> None:
    kv, conn, sched = setup(tokens=0, sent_s=10.0)
    r = req(0, 8, 1)
    sched.add(r)
    free0 = kv.num_free_blocks
    plan = sched.schedule(0.0, 0)
    done = sched.update(plan, 1.0, 0)
    assert done == [r]
    sched.finish(done, 1.0, 0)
    assert r.status is Status.FINISHED and sched.running == []
    assert kv.num_free_blocks == free0 - 2 and sched.transfers.params == {0: {"blocks": 2}}
    kv.check(sched.kv_holders())                             # the sender still holds them
    assert conn.sending == {0}
    sched.schedule(5.0, 1)
    assert kv.num_free_blocks == free0 - 2
    sched.schedule(10.0, 2)
    assert kv.num_free_blocks == free0 and sched.kv_holders() == []
    kv.check([])


def test_slab_and_hybrid_refuse_a_connector_in_one_line() -> None:
    import pytest

    from sim.kv.coordinator import HybridAllocator
    from sim.kv.slab import SlabAllocator
    from sim.kv.window import KvGroup

    for kv in (SlabAllocator(64, 64), HybridAllocator(33, 4, (KvGroup(), KvGroup("sliding_window", 8)))):
        with pytest.raises(ValueError, match="connector"):
            kv.connect(RemoteKv(PagedAllocator(9, 4), 0, 0.0))
        assert kv.connector is None


def test_a_run_with_an_asynchronous_connector_fast_forwards_in_lockstep() -> None:
    """Such a connector is polled once per planned step; the replica's windows sleep through
    each step they apply (sim/engine/fastforward/lockstep.py), and the run is bit-identical to
    exact steps: loads arriving at 0.5 s, frees delayed to 0.8 s (after which they free at a
    poll, before the step's running pass), and decodes long enough for windows to form."""
    import simpy

    from sim.config.schema import make_config
    from sim.io.ingest import make_requests
    from sim.run.build import build, new_replica
    from tests.conftest import make_trace

    def run(exact: bool) -> tuple[list[tuple[float, float, int]], list[Any], int]:
        cfg = make_config(num_gpu_blocks=120, max_model_len=512, exact_steps=exact, cost_model="constant:0.01",
                          api_server_count=0)
        parts = build(cfg)
        parts.kv.connect(RemoteKv(parts.kv, 64, 0.5, sent_s=0.8))  # type: ignore[arg-type]
        env = simpy.Environment()
        rep = new_replica(env, cfg, parts=parts, check=True)
        rows = [{"arrival_s": 0.013 * i, "prompt_tokens": 96 + 16 * (i % 5), "output_tokens": 40 + 7 * (i % 6),
                 "prompt_token_ids": list(range(i % 3, i % 3 + 96 + 16 * (i % 5)))} for i in range(40)]
        reqs = make_requests(make_trace(rows), cfg)
        rep.submit_all(reqs)
        env.run()
        done = [(r.first_token_s, r.finish_s, r.num_preemptions) for r in reqs]
        return done, rep.log.frame().values.tolist(), rep.kernel.ff_steps

    done_x, log_x, ff_x = run(True)
    done_f, log_f, ff_f = run(False)
    assert ff_x == 0 and ff_f > len(log_f) // 4
    assert all(f >= 0 for _, f, _ in done_f)
    assert done_f == done_x and log_f == log_x
