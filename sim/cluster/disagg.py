"""Run a cluster (:mod:`sim.cluster.spec`): unified, prefill and decode instances in ONE SimPy
environment, P/D transfers as KV connectors (:mod:`sim.cluster.pd`) over shared links.

Flows, at each arrival (the router process wakes first at that instant, :mod:`sim.cluster.router`):

- **decode-first** (llm-d): the decode pool's router picks the decode instance ``D``; when the
  prompt part ``D``'s cache does not hold (as the router's view sees it) is under
  ``threshold`` tokens, ``D`` prefills it locally (a plain request); otherwise the prefill
  pool's router picks ``P``, which runs the prompt with one output token, and ``D`` pulls the
  KV when ``P`` is done;
- **prefill-first** (vLLM's disaggregated proxy): ``P`` is picked at arrival, ``D`` when ``P``
  is done (on the decode pool's state then).

Every instance fast-forwards; prefill and decode instances in lockstep with SimPy, since their
connectors complete transfers between steps (:mod:`sim.engine.fastforward.lockstep`). Behind
closed-loop clients every instance takes exact steps (:mod:`sim.cluster.sends`).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import simpy

from sim.cluster.links import Link, make_link
from sim.cluster.monitor import SloMonitor
from sim.cluster.pd import DecodeReceiver, PrefillSender, PullRecord
from sim.cluster.role_pool import RolePool
from sim.cluster.sends import behind_router
from sim.cluster.slo import Slo
from sim.cluster.spec import ClusterSpec, Instance
from sim.collector import no_collections
from sim.engine.replica import Replica
from sim.engine.sleep import sleep_until
from sim.errors import ConfigError
from sim.frontend.ingress import Ingress
from sim.frontend.stage import enter, fleet_frontend, leave, no_frontend, with_columns
from sim.io.ingest import make_requests
from sim.io.records import record_ends, stacked_frame
from sim.io.results import request_frame
from sim.kv.base import cdiv
from sim.kv.hashing import BlockHasher
from sim.request import Request, Status
from sim.run.build import build, new_replica
from sim.run.clients import ClientSpec, closed_loop
from workloads.schema import Trace

MEMO = 8192  # requests whose prompt-block keys the cluster's hasher keeps (kv/hashing.py)


@dataclass(slots=True)
class ClusterResult:
    requests: pd.DataFrame            # request_frame + instance, prefill_instance, prefill_start_s,
                                      # prefill_done_s, prefill_hit_tokens, transfer_s, kv_wait_s
    steps: pd.DataFrame               # every instance's steps + instance
    names: list[str]
    roles: list[str]
    links: dict[tuple[int, int], Link] = field(default_factory=dict)
    receiving: dict[int, list[tuple[float, int]]] = field(default_factory=dict)  # decode: blocks held receiving
    decode_kv_blocked: int = 0        # pulls that first waited for free decode blocks
    end_s: float = 0.0               # the last step's end (the clock, if later)
    aborted: bool = False             # stopped early: the SLO verdict was already "fail"
    failing: tuple[str, ...] = ()     # when aborted: the targets that were certain to fail


def _prefill_clone(r: Request) -> Request:
    """The request as the prefill instance runs it: its prompt and one output token."""
    return Request(uid=r.uid, request_id=r.request_id, arrival_s=r.arrival_s, prompt_tokens=r.prompt_tokens,
                   output_tokens=1, priority=r.priority, content=r.content)


class ClusterRun:
    def __init__(self, spec: ClusterSpec, trace: Trace, clients: ClientSpec | None = None) -> None:
        self.spec = spec
        self.env = env = simpy.Environment()
        self.reps: list[Replica] = []
        self.senders: dict[int, PrefillSender] = {}
        self.receivers: dict[int, DecodeReceiver] = {}
        for i, inst in enumerate(spec.instances):
            self.reps.append(self._instance(i, inst))
        B = spec.instances[0].config.block_size
        if any(i.config.block_size != B for i in spec.instances):
            raise ConfigError("cluster: every instance needs the same block_size (KV moves block by block)")
        roles = [i.role for i in spec.instances]
        hasher = BlockHasher(B, memo=MEMO)  # one for every instance and view: a prompt is hashed once
        for rep in self.reps:
            if isinstance(getattr(rep.kv, "hasher", None), BlockHasher):
                rep.kv.hasher = hasher  # type: ignore[attr-defined]  # (a paged pool's; a slab has none)
        front = [k for k, r in enumerate(roles) if r in ("unified", "decode")]
        self.front = RolePool(front, [self.reps[k] for k in front], spec.router, hasher)
        back = [k for k, r in enumerate(roles) if r == "prefill"]
        self.back = RolePool(back, [self.reps[k] for k in back], spec.prefill_router, hasher) if back else None
        self.links: dict[tuple[int, int], Link] = {}
        self.sent = make_requests(trace, spec.instances[front[0]].config)  # uid order
        self.fe = fleet_frontend([spec.instances[k].config for k in front])  # the front instances' API servers
        self.ing: Ingress | None = None
        self.reqs = self.sent  # in engine-arrival order, the router's
        if self.fe is not None:
            self.ing, self.reqs = enter(self.sent, self.fe)
        self.loop = closed_loop(clients, trace, self.sent, self.fe, fleet=True)  # None: open loop
        if self.loop is not None:  # the router's first arrivals; the rest sent at finishes
            self.reqs = behind_router(self.loop, self.reps, roles, self._dispatch, lambda c: self.sent[c.uid])
        self.clones: dict[int, Request] = {}
        self.decode_of: dict[int, int] = {}      # uid -> decode instance (decode-first)
        self.prefill_of: dict[int, int] = {}
        self.records: dict[int, PullRecord] = {}
        self.instance = np.full(len(self.sent), -1, dtype=np.int64)
        self._next = 0
        env.process(self._route())
        for k, rep in enumerate(self.reps):  # (lockstep windows keep per-request counts only for a router that reads them)
            router = spec.prefill_router if roles[k] == "prefill" else spec.router
            rep.follow_router(self.next_arrival, real_counts=router.reads_request_counts)

    def _instance(self, i: int, inst: Instance) -> Replica:
        cfg = inst.config
        try:
            parts = build(cfg)
        except ConfigError as e:
            raise ConfigError(f"cluster: {inst.role} instance {inst.name}: {e}") from None
        if inst.role != "unified":
            if cfg.kv_offloading_size or not parts.kv.enable_caching or not parts.kv.paged:
                raise ConfigError(f"cluster: instance {inst.name}: a {inst.role} instance needs the paged allocator "
                                  "with prefix caching and no CPU offload tier (one KV connector per instance)")
            need = cdiv(parts.budget.max_model_len, cfg.block_size)
            if inst.role == "decode" and parts.kv.usable_blocks < need:
                raise ConfigError(f"cluster: decode instance {inst.name}: its KV pool of {parts.kv.usable_blocks} blocks "
                                  f"is smaller than one request of max_model_len {parts.budget.max_model_len} "
                                  f"({need} blocks)")
        c: PrefillSender | DecodeReceiver | None = None
        if inst.role == "prefill":
            c = self.senders[i] = PrefillSender(self._prefilled)
        elif inst.role == "decode":
            c = self.receivers[i] = DecodeReceiver(parts.budget.bytes_per_block * cfg.tensor_parallel_size,
                                                   cfg.block_size)
        if c is not None:
            parts.kv.connect(c)
        rep = new_replica(self.env, cfg, parts=parts)
        if c is not None:
            c.rep = rep
        return rep

    def next_arrival(self) -> float:
        return self.reqs[self._next].arrival_s if self._next < len(self.reqs) else math.inf

    def _link(self, p: int, d: int) -> Link:
        link = self.links.get((p, d))
        if link is None:
            a, b = self.spec.instances[p], self.spec.instances[d]
            lanes = min(a.config.tensor_parallel_size, b.config.tensor_parallel_size)
            link = self.links[(p, d)] = make_link(self.env, f"{a.name}->{b.name}", self.spec.link_spec(a.name, b.name),
                                                  lanes)
        return link

    # ---- the flows ------------------------------------------------------------------------------
    def _route(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for i, r in enumerate(self.reqs):
            if r.arrival_s > env.now:
                yield from sleep_until(env, r.arrival_s, urgent=True)
            self._next = i + 1
            self._dispatch(r)

    def _dispatch(self, r: Request) -> None:
        """Route ``r`` now (an arrival, or a closed-loop client's send: :mod:`sim.cluster.sends`)."""
        now, spec, B = self.env.now, self.spec, self.front.state.block_size
        if self.back is None or spec.flow == "decode-first":
            d = self.front.idx[self.front.pick(r, now)]
            view = self.front.state.view
            uncached = r.prompt_tokens - (view.hits(r, self.reps[d], now) * B if view is not None else 0)
            if self.back is None or uncached < spec.threshold:
                self.instance[r.uid] = d
                self.reps[d].submit(r)  # unified, or llm-d's threshold rule: prefill locally
                return
            self.decode_of[r.uid] = d
        p = self.back.idx[self.back.pick(r, now)]
        self.prefill_of[r.uid] = p
        clone = self.clones[r.uid] = _prefill_clone(r)
        self.reps[p].submit(clone)

    def _prefilled(self, clone: Request) -> None:
        """``clone`` finished on its prefill instance: hand the request to its decode instance."""
        r = self.sent[clone.uid]
        p = self.prefill_of[r.uid]
        d = self.decode_of.get(r.uid)
        if d is None:
            d = self.front.idx[self.front.pick(r, self.env.now)]
        self.instance[r.uid] = d
        reject = self.reps[d].reject
        rej = reject(r) if reject is not None else None
        if rej is not None:  # the decode instance can never run it: rejected, the prefill blocks freed
            r.status, r.reject_reason, r.reject_detail = Status.REJECTED, rej.code, rej.detail
            self.senders[p].sent(r.uid)
            if self.loop is not None:
                self.loop.done([r], self.env.now)
            return
        rec = self.records[r.uid] = PullRecord(r.uid, p, d)
        self.receivers[d].expect(r, rec, self.senders[p], self._link(p, d))
        self.reps[d].submit(r)

    def run(self, stop_on_fail: tuple[Slo, int] | None = None, checks: int = 40) -> ClusterResult:
        if stop_on_fail is not None and self.loop is not None:
            raise ConfigError("not modelled yet: an SLO-stopped cluster run with closed-loop clients")
        aborted, failing = False, tuple[str, ...]()
        with no_collections():  # (the result too: the step logs' records are laid out before collection resumes)
            if stop_on_fail is None:
                self.env.run()
            else:
                monitor = SloMonitor(stop_on_fail[0], self.reqs, stop_on_fail[1])
                aborted = self._run_monitored(monitor, checks)
                failing = monitor.failing(self.env.now) if aborted else ()
            for uid, clone in self.clones.items():  # rejected on its prefill instance: rejected for good
                r = self.sent[uid]
                if clone.status is Status.REJECTED and r.status is not Status.REJECTED:
                    r.status, r.reject_reason, r.reject_detail = Status.REJECTED, clone.reject_reason, clone.reject_detail
                    self.instance[uid] = self.prefill_of[uid]
            res = self._result()
        res.aborted, res.failing = aborted, failing
        return res

    def _ended(self) -> int:
        """Requests ended: finished or rejected, on their decode instance or (a clone) their prefill one."""
        done = sum(r.status in (Status.FINISHED, Status.REJECTED) for r in self.reqs)
        return done + sum(c.status is Status.REJECTED and self.sent[u].status is not Status.REJECTED
                          for u, c in self.clones.items())

    def _run_monitored(self, monitor: SloMonitor, checks: int) -> bool:
        """Run in ``checks`` chunks over the arrival span (as the routed replay's monitored run);
        True if the monitor found the SLO certain to fail and the run stopped there."""
        env, reqs = self.env, self.reqs
        span = reqs[-1].arrival_s - reqs[0].arrival_s if reqs else 0.0
        every = max(span / max(checks, 1), 1e-3)
        while self._ended() < len(reqs) and env.peek() < math.inf:
            env.run(until=env.now + every)
            if monitor(env.now):
                return True
        return False

    def _result(self) -> ClusterResult:
        fe, ing, recs = self.fe, self.ing, [rep.log.records() for rep in self.reps]
        ends = [record_ends(a) for a in recs]  # each instance's; a request's tokens after its first: its decode one's
        api = leave(self.sent, fe, ing, ends, self.instance) if fe is not None and ing is not None \
            else no_frontend(self.sent)
        frame = with_columns(request_frame(self.sent), api)
        n = len(self.sent)
        pre, phit = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        xfer, wait, done, start = (np.full(n, np.nan) for _ in range(4))
        for uid, p in self.prefill_of.items():
            c = self.clones[uid]
            pre[uid], phit[uid] = p, c.prefix_hit_tokens  # the prefill side's own prefix-cache hit
            done[uid] = c.finish_s if c.finish_s >= 0 else np.nan
            start[uid] = c.first_scheduled_s if c.first_scheduled_s >= 0 else np.nan
        for uid, rec in self.records.items():
            if rec.landed_s >= 0:
                xfer[uid] = rec.landed_s - rec.start_s
                wait[uid] = rec.landed_s - rec.reached_s
        frame["instance"], frame["prefill_instance"], frame["prefill_hit_tokens"] = self.instance, pre, phit
        frame["prefill_start_s"], frame["prefill_done_s"] = start, done  # on its prefill instance
        frame["transfer_s"], frame["kv_wait_s"] = xfer, wait
        frame["replica"] = self.instance
        steps = stacked_frame(recs, receiving_slots=np.concatenate([self._receiving(k, e) for k, e in enumerate(ends)]))
        end = max([self.env.now] + [float(e.max()) for e in ends if len(e)])  # the last step's, or the clock's if later
        return ClusterResult(frame, steps, [i.name for i in self.spec.instances],
                             [i.role for i in self.spec.instances], self.links,
                             {k: c.receiving for k, c in self.receivers.items()},
                             sum(c.blocked for c in self.receivers.values()), end)

    def _receiving(self, k: int, at: np.ndarray) -> np.ndarray:
        """Token slots of blocks held by requests waiting for their KV (decode side), at each
        step's record time. The allocator's breakdown counts them in ``internal_frag_slots`` (held,
        no computed token states yet): this column says how much of that is receiving."""
        c = self.receivers.get(k)
        if c is None or not c.receiving:
            return np.zeros(len(at), dtype=np.int64)
        t = np.array([x[0] for x in c.receiving])
        held = np.array([0, *(x[1] for x in c.receiving)], dtype=np.int64)
        return held[np.searchsorted(t, at, side="right")] * c.block_size


def run_cluster(spec: ClusterSpec, trace: Trace, *, stop_on_fail: tuple[Slo, int] | None = None,
                checks: int = 40, clients: ClientSpec | None = None) -> ClusterResult:
    """Simulate ``trace`` on the cluster ``spec``; ``clients``: closed-loop sending
    (:mod:`sim.cluster.sends`).

    ``stop_on_fail=(slo, skip)`` checks ``checks`` times over the trace's span whether the SLO
    (on requests ``skip:``) can still pass, and stops when it cannot (:mod:`sim.cluster.monitor`,
    as :func:`sim.cluster.replay.replay_fleet`); unfinished requests then count as misses."""
    return ClusterRun(spec, trace, clients).run(stop_on_fail, checks)
