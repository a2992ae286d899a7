"""Trace rows -> Requests, with ``n`` / ``beam_width`` > 1 fanned out into sibling requests.

In V1 mode siblings share their prompt through the prefix cache (``("shared", row)`` content
when the row has no token ids of its own); in paper-v0 fork mode they form a sequence group
that is admitted and forked together (:mod:`sim.sched.paper_v0`).
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from sim.collector import paused
from sim.config.schema import SimConfig
from sim.request import Content, Request
from workloads.resolution import spread_arrivals
from workloads.schema import Trace

#: the arrival jitter's own stream of the run's seed, apart from the scheduler's (draft acceptance,
#: beam re-forks): spreading a coarse trace never shifts those draws
ARRIVAL_STREAM = 7


def arrival_times(trace: Trace, cfg: SimConfig) -> np.ndarray:
    """The trace's arrivals: coarse timestamps spread over their resolution (unless ``arrival_jitter``
    is off), then the rate rescaled: ``total_rate`` (mean req/s over the span) or ``rate_scale``."""
    t = trace.df["arrival_s"].to_numpy(np.float64)
    if cfg.arrival_jitter:
        t = spread_arrivals(t, np.random.default_rng([cfg.seed, ARRIVAL_STREAM]))
    if cfg.total_rate is not None:
        t0, span = (float(t.min()), float(t.max() - t.min())) if len(t) else (0.0, 0.0)
        if span > 0 and len(t) > 1:
            t = t0 + (t - t0) * (len(t) / span) / cfg.total_rate
    elif cfg.rate_scale != 1.0:
        t = t / cfg.rate_scale
    return t


def make_requests(trace: Trace, cfg: SimConfig) -> list[Request]:
    df = trace.df
    arrival = arrival_times(trace, cfg).tolist()
    prompt = df["prompt_tokens"].to_numpy(np.int64).tolist()
    output = df["output_tokens"].to_numpy(np.int64).tolist()
    rid = df["request_id"].astype(str).tolist()
    prio = df["priority"].to_numpy(np.int64).tolist() if "priority" in df else None
    nsamp = df["n"].to_numpy(np.int64).tolist() if "n" in df else None
    beam = df["beam_width"].to_numpy(np.int64).tolist() if "beam_width" in df else None
    ids = df["prompt_token_ids"].tolist() if "prompt_token_ids" in df else None
    hids = df["hash_ids"].tolist() if "hash_ids" in df else None
    tph = df["tokens_per_hash"].to_numpy(np.int64).tolist() if "tokens_per_hash" in df else None
    caching = bool(cfg.resolved("enable_prefix_caching"))
    fork = cfg.resolved("sharing") == "fork-cow" and cfg.allocator == "paged"
    out: list[Request] = []
    with paused():  # every request lives on: no collection walks them as they pile up (collector.py)
        if ids is None and hids is None and nsamp is None and beam is None:  # one plain request a row
            # (the loop below makes the same requests: uid = row, no content, parent or group)
            return list(map(Request, range(len(arrival)), rid, arrival, prompt, output, prio or repeat(0)))
        for i in range(len(arrival)):
            content: Content | None = None
            if caching:
                if ids is not None and isinstance(ids[i], (list, tuple, np.ndarray)):
                    content = ("ids", tuple(int(x) for x in ids[i]))
                elif hids is not None and isinstance(hids[i], (list, tuple, np.ndarray)) and len(hids[i]):
                    content = ("hash", tuple(int(x) for x in hids[i]), int(tph[i]) if tph else 512)
            width = beam[i] if beam else 1
            fan = max(nsamp[i] if nsamp else 1, width)
            if fan > 1 and content is None and caching:
                content = ("shared", i)
            parent = len(out) if fan > 1 else -1
            group: list[Request] | None = [] if fork and fan > 1 else None
            for k in range(fan):
                r = Request(
                    uid=len(out), request_id=rid[i] if fan == 1 else f"{rid[i]}#{k}",
                    arrival_s=arrival[i], prompt_tokens=prompt[i], output_tokens=output[i],
                    priority=prio[i] if prio else 0, content=content, parent=parent,
                    group=group, beam=group is not None and width > 1)
                if group is not None:
                    group.append(r)
                out.append(r)
    return out
