"""Ingress: every request through the API server(s) before the engine sees it.

Each API-server process is one FIFO server. A request's ingress (chat template, tokenization,
the hand-off to the engine core) starts when its server is free and the request has been sent;
the engine receives it when the ingress completes, as vLLM's engine does (its ``arrival_time``
is stamped after the API server has processed the request). With one server that is Lindley's
recursion on the send times::

    start_k = max(send_k, end_{k-1}),   end_k = start_k + service_k

Ingress is computed before the engine runs, from the send times alone: the model gives ingress
priority over the same process's egress work (:mod:`sim.frontend.egress` serves the streamed
tokens in the time ingress leaves free), so no engine event can move an ingress.

``--api-server-count N``: vLLM binds one listening socket and hands it to all N processes
(``run_multi_api_server`` -> ``APIServerProcessManager``); whichever process accepts a new
connection first serves it, with no round-robin. kvsim idealises that race as "the server free
soonest takes the next request" (ties: the lowest index), i.e. one queue in front of N servers. A real accept race can be less even (a busy process that wakes first may win), so N
servers' gain here is an upper bound.

A request fanned out into ``n`` samples is one HTTP request: one ingress, its samples reach the
engine together (their leader's completion) and stream through the same server.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Ingress:
    """Per request, in uid order, and per server the intervals its ingress work keeps it busy."""

    send_s: np.ndarray                  # the client's send time (the trace's arrival)
    engine_arrival_s: np.ndarray        # when the ingress completes: the engine's arrival
    server: np.ndarray                  # index of the API server that took the request (int64)
    busy: tuple[tuple[np.ndarray, np.ndarray], ...]  # per server: ingress [start, end), in time order

    @property
    def servers(self) -> int:
        return len(self.busy)


def lindley_starts(send: np.ndarray, service: np.ndarray) -> np.ndarray:
    """Start times of one FIFO server's jobs, in send order, vectorised:
    ``start_k = S_{k-1} + max_{j<=k}(send_j - S_{j-1})`` with ``S`` the running sum of services."""
    before = np.cumsum(service) - service
    return before + np.maximum.accumulate(send - before)


def earliest_free(send: np.ndarray, service: np.ndarray, servers: int) -> tuple[np.ndarray, np.ndarray]:
    """(start times, server index) of jobs in send order, each taken by the server free soonest
    (the one idle longest; ties: the lowest index): one queue in front of ``servers`` FIFO servers."""
    free = [(0.0, k) for k in range(servers)]
    start = np.empty(len(send))
    server = np.empty(len(send), np.int64)
    for i, (a, s) in enumerate(zip(send.tolist(), service.tolist(), strict=True)):
        t, k = heapq.heappop(free)
        start[i], server[i] = max(a, t), k
        heapq.heappush(free, (max(a, t) + s, k))
    return start, server


def ingress(send: np.ndarray, service: np.ndarray, leader: np.ndarray, servers: int) -> Ingress:
    """The ingress of every request: ``send`` and ``service`` per request (uid order), ``leader``
    the uid of the request whose HTTP request it belongs to (itself, or its fan-out leader)."""
    n = len(send)
    lead = np.flatnonzero(leader == np.arange(n))
    order = lead[np.lexsort((lead, send[lead]))]  # FIFO: by send time, then uid
    a, s = send[order], service[order]
    if servers == 1:
        start, srv = lindley_starts(a, s), np.zeros(len(order), np.int64)
    else:
        start, srv = earliest_free(a, s, servers)
    end = start + s
    engine, server = np.empty(n), np.empty(n, np.int64)
    engine[order], server[order] = end, srv
    busy = tuple((start[srv == k], end[srv == k]) for k in range(servers))
    return Ingress(np.asarray(send, np.float64), engine[leader], server[leader], busy)
