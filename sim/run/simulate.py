"""Run one replica over a trace and collect flat results.

    result = simulate(cfg, trace)
    result.requests   # one row per request (pandas)
    result.steps      # one row per engine step
    result.summary    # typed Summary; summary.json on disk (result.write(out))
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import simpy

from sim.collector import no_collections
from sim.config.schema import SimConfig
from sim.engine.replica import Replica
from sim.frontend.report import api_server_info
from sim.frontend.stage import FrontEnd, enter, leave, no_frontend, step_ends, with_columns
from sim.io.ingest import make_requests
from sim.io.records import StepLog
from sim.io.results import request_columns, request_frame
from sim.io.stream import StepSink, StepStats, write_requests
from sim.io.summary import (
    PrefixCache,
    RunCounters,
    Summary,
    Timings,
    TraceInfo,
    kv_offload_of,
    summarize,
)
from sim.memory.budget import KvBudget
from sim.request import Request
from sim.run.build import Components, build, new_replica
from sim.run.clients import ClientSpec, closed_loop
from sim.run.static import content_hash_of
from sim.sched.plan import PrefixStats
from workloads.schema import Trace


@dataclass
class SimResult:
    """``tables``: ``"full"`` (both frames in memory), ``"streamed"`` (requests.parquet and
    steps.parquet already written to ``streamed``; ``requests`` holds only the summary's
    columns, ``steps`` is empty) or ``"summary"`` (``--summary-only``: no tables kept)."""

    config: SimConfig
    budget: KvBudget
    cost_model: str
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: Summary
    tables: str = "full"
    streamed: Path | None = None
    counters: RunCounters | None = None  # what the summary read from the engine besides the tables

    def write(self, out: Path) -> Timings:
        """Write requests.parquet, steps.parquet (unless streamed or summary-only) and summary.json under ``out``."""
        t0 = time.perf_counter()
        out.mkdir(parents=True, exist_ok=True)
        if self.tables == "full":
            self.requests.to_parquet(out / "requests.parquet", index=False)
            self.steps.to_parquet(out / "steps.parquet", index=False)
        elif self.tables == "streamed" and self.streamed is not None and self.streamed.resolve() != out.resolve():
            for name in ("requests.parquet", "steps.parquet"):
                shutil.copyfile(self.streamed / name, out / name)
        timings = dataclasses.replace(self.summary.timings, write_s=round(time.perf_counter() - t0, 4))
        self.summary = dataclasses.replace(self.summary, timings=timings)
        (out / "summary.json").write_text(json.dumps(self.summary.to_json(), indent=2, default=_json_default))
        return timings


def _json_default(o: object) -> object:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(type(o))


def _prefix(st: PrefixStats) -> PrefixCache:
    return PrefixCache(st.queries, st.hits, st.hits / st.queries if st.queries else 0.0,
                       st.preempted_queries, st.preempted_hits)


def run_summary(cfg: SimConfig, parts: Components, requests_df: pd.DataFrame, stats: pd.DataFrame | StepStats,
                counters: RunCounters, trace: Trace, load_s: float, sim_s: float,
                clients: ClientSpec | None = None) -> Summary:
    """The run's :class:`Summary` from its tables (or folded step figures) and counters; ``clients``
    is recorded beside the load it made (a run's inputs: the trace and how it was sent)."""
    return dataclasses.replace(
        summarize(cfg, parts.budget, parts.cost, requests_df, stats, counters),
        max_concurrency=clients.max_concurrency if clients is not None else None,
        timings=Timings(round(load_s, 4), round(sim_s, 4), 0.0), kv_offload=kv_offload_of(parts.kv, counters.prefix),
        api_server=api_server_info(cfg),
        trace=TraceInfo(trace.path, trace.format, trace.num_requests, content_hash_of(trace),
                        trace.num_bad_rows, trace.notes))


def simulate(cfg: SimConfig, trace: Trace, *, check: bool = False, progress: Any = None,
             load_s: float = 0.0, on_step: Callable[[Replica], None] | None = None,
             requests: list[Request] | None = None, summary_only: bool = False,
             stream_to: Path | None = None, on_build: Callable[[Components], None] | None = None,
             clients: ClientSpec | None = None) -> SimResult:
    """Run one replica over the trace. ``check=True`` verifies allocator invariants every step.

    ``on_step(replica)`` is called after every step that runs one at a time; fast-forwarded
    steps skip it, so pass ``exact_steps=True`` in the config to see every step.
    ``progress(done, total)`` is called every few thousand steps.
    ``requests``: fresh Requests made from ``trace`` for ``cfg`` (a sweep worker's reuse,
    :mod:`sim.sweep.reuse`); else made here. ``stream_to``: write requests.parquet and
    steps.parquet there by chunks, in bounded memory (:mod:`sim.io.stream`);
    ``summary_only``: keep no tables, only the summary (same figures as the full path).
    ``on_build(parts)`` sees the replica's parts before it runs (:mod:`sim.sweep.derive`).
    ``clients``: closed-loop sending (``--max-concurrency``; a session trace is closed loop
    without it): :mod:`sim.run.clients`.
    """
    t0 = time.perf_counter()
    with no_collections() as settle:  # (sim/collector.py)
        parts = build(cfg)
        if on_build is not None:
            on_build(parts)
        reqs = requests if requests is not None else make_requests(trace, cfg)
        fe = FrontEnd.of(cfg)  # the API server(s): engine arrivals now, client times after the run
        loop = closed_loop(clients, trace, reqs, fe)  # None: open loop
        live = loop.live if loop is not None else None  # the API server solved as the run goes
        ing, inbox = enter(reqs, fe) if fe is not None and live is None else (None, reqs)
        env = simpy.Environment()
        kv, sched = parts.kv, parts.sched
        sink = StepSink(stream_to / "steps.parquet" if stream_to else None, kv.block_size,
                        keep_ends=ing is not None) if summary_only or stream_to else None
        on_progress = None
        if progress is not None or sink is not None:
            total = len(reqs)
            last = [-1]

            def on_progress(rep: Replica) -> None:
                if sink is not None:
                    sink.maybe_drain(rep.log)
                if progress is not None and rep.step - last[0] >= 2048:
                    last[0] = rep.step
                    progress(len(rep.finished) + len(rep.rejected), total)

        rep = new_replica(env, cfg, parts=parts, check=check, on_step=on_step, on_progress=on_progress)
        if loop is not None:
            loop.feed(rep)
        else:
            rep.submit_all(inbox)
        settle()  # the requests and the replica live through the run: out of the collector's sight
        env.run()
    if check:
        kv.check([])
    if sink is None:
        steps = rep.log.frame()
        stats: pd.DataFrame | StepStats = steps
        ends = step_ends(steps)
    else:
        stats, steps = sink.close(rep.log, kv.paged), StepLog().frame()
        ends = sink.ends()
    api = live.columns() if live is not None else leave(reqs, fe, ing, [ends]) if fe is not None and ing is not None \
        else no_frontend(reqs)
    sim_s = time.perf_counter() - t0
    counters = RunCounters(rep.ff_steps, rep.busy_s, sched.num_preemptions,
                           sched.preemption.fallbacks, kv.evictions, _prefix(sched.stats),
                           kv.paged, kv.block_size)
    if sink is None:
        requests_df = with_columns(request_frame(reqs), api)
    else:
        if stream_to is not None:
            write_requests(reqs, stream_to / "requests.parquet", extra=api)
        requests_df = with_columns(request_columns(reqs), api)
    summary = run_summary(cfg, parts, requests_df, stats, counters, trace, load_s, sim_s, clients)
    tables = "full" if sink is None else "streamed" if stream_to is not None else "summary"
    return SimResult(cfg, parts.budget, parts.cost.name, requests_df, steps, summary, tables, stream_to, counters)
