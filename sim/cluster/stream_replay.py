"""A routed fleet replay in bounded memory: every replica's steps drained by chunks.

:func:`sim.cluster.replay.replay_fleet` keeps every replica's step log and builds frames at
the end; a day of traffic on 32 replicas is tens of millions of steps. This replay routes
the same way (the same policies, :class:`~sim.cluster.router.Router` for live ones) but gives
each replica a :class:`~sim.io.stream.StepSink` on its ``on_progress`` hook, so the step
records never pile up: they go to ``OUT/steps-<replica>.parquet`` (with ``out``) or only into
the summary sums (``out=None``: summary only). Request rows are written to
``OUT/requests.parquet`` by chunks at the end (with their replica). Latency percentiles come
from numpy columns (:func:`sim.io.results.request_columns`), exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import simpy

from sim.cluster.router import Router, RouterState, parse_router
from sim.collector import no_collections
from sim.config.schema import SimConfig
from sim.engine.replica import Replica
from sim.errors import ConfigError
from sim.frontend.stage import enter, fleet_frontend, leave, no_frontend
from sim.io import stream
from sim.io.ingest import make_requests
from sim.io.results import request_columns
from sim.io.stream import StepSink, StepStats, write_requests
from sim.io.summary import Percentiles
from sim.run.build import new_replica
from workloads.schema import Trace


@dataclass(frozen=True, slots=True)
class FleetSummary:
    num_requests: int
    num_finished: int
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    steps: tuple[StepStats, ...]       # per replica
    preemptions: tuple[int, ...]
    requests_per_replica: tuple[int, ...]

    @property
    def num_steps(self) -> int:
        return sum(s.num_steps for s in self.steps)


def replay_streamed(cfgs: Sequence[SimConfig], trace: Trace, router: str = "least-outstanding-tokens",
                    out: Path | None = None, *, lazy_reads: bool = True) -> FleetSummary:
    """Replay ``trace`` through one replica per config behind ``router``, in bounded memory.

    ``lazy_reads=False`` makes every replica pause at every arrival even for a router that reads
    only totals (the same outputs, slower: for benchmarks)."""
    if not cfgs:
        raise ConfigError("a fleet needs at least one replica")
    spec = parse_router(router)
    choose = spec.make()
    env = simpy.Environment()
    # a tuple per step costs ~400 bytes until drained: the replicas share one chunk's worth
    chunk = max(2048, stream.CHUNK // len(cfgs))
    fe = fleet_frontend(cfgs)
    sinks = [StepSink(out / f"steps-{i}.parquet" if out else None, cfg.block_size, chunk, keep_ends=fe is not None)
             for i, cfg in enumerate(cfgs)]

    def drainer(sink: StepSink):  # type: ignore[no-untyped-def]
        return lambda rep: sink.maybe_drain(rep.log)

    reps: list[Replica] = [new_replica(env, cfg, on_progress=drainer(s)) for cfg, s in zip(cfgs, sinks, strict=True)]
    sent = make_requests(trace, cfgs[0])
    ing, reqs = enter(sent, fe) if fe is not None else (None, sent)  # reqs: engine-arrival order
    state = RouterState([1.0] * len(cfgs), cfgs[0].block_size)
    if spec.static or len(reps) == 1:
        assigned = np.empty(len(reqs), dtype=np.int64)
        for r in reqs:
            k = 0 if len(reps) == 1 else choose(r, reps, state)
            assigned[r.uid] = k
            reps[k].submit(r)
    else:
        rt = Router(env, reps, reqs, choose, state)
        for rep in reps:  # live routing keeps fast-forward (windows wait for the router)
            rep.follow_router(rt.next_arrival, routed=rt.routed, real_counts=spec.reads_request_counts,
                             lazy_reads=lazy_reads and spec.reads_only_totals)
        assigned = rt.assigned
    with no_collections():
        env.run()
    stats = tuple(s.close(rep.log, rep.kv.paged) for s, rep in zip(sinks, reps, strict=True))
    api = leave(sent, fe, ing, [s.ends() for s in sinks], assigned) if fe is not None and ing is not None \
        else no_frontend(sent)
    if out is not None:
        write_requests(sent, out / "requests.parquet", extra=api)
        pd.DataFrame({"replica": assigned}).to_parquet(out / "replica.parquet", index=False)
    cols = request_columns(sent)
    done = cols[cols["status"] == "finished"]
    return FleetSummary(len(sent), len(done), Percentiles.of(done["ttft_s"]), Percentiles.of(done["tpot_s"]),
                        Percentiles.of(done["e2e_s"]), stats,
                        tuple(int(r.sched.num_preemptions) for r in reps),
                        tuple(int(c) for c in np.bincount(assigned, minlength=len(reps))))
