"""Egress: the API server detokenizes and streams every token the engine produces.

Computed after the engine has run, from each request's engine times: its first token at ``f``,
its last at ``e``, ``n`` tokens in all. A request's egress work reaches its API server as

    at f         the first token's chunk(s)             (w1: the chat role chunk + token 1)
    over (f, e)  tokens 2 .. n-1, spread evenly          (n - 2) x output_token_s, a ramp
    at e         the last token and the stream's end     output_token_s + end_s

and the client sees a token when the server has done all egress work that reached it before
(FIFO) in the time its ingress work leaves free: the server runs ingress first (preemptive
priority), so ingress times (:mod:`sim.frontend.ingress`) stay what the engine saw. The queue
is solved as a fluid: between two consecutive event times every rate is constant, so the
backlog ``B`` after each event follows ``B_k = max(0, B_{k-1} + work_in_k - capacity_k) + jump_k``,
solved at once by running sums; a chunk arriving at ``t`` with backlog ``B`` (its own work
included) is delivered when the server's free capacity ``C`` has grown by ``B``:
``C^-1(C(t) + B)``, where ``C(t) = t - ingress busy time up to t``.

Approximations (said in the README too): tokens between the first and the last arrive evenly
rather than at step ends (exact at the first and the last token, which set TTFT and E2E); and
vLLM's asyncio event loop runs ingress and egress work roughly first-come first-served, where
kvsim serves ingress first. Both do the same work, so a saturated server finishes at the same
time; in a burst (every request sent before the first token exists) the two are the same
schedule, since first-come first-served also puts every ingress ahead of all egress. They differ
only under sustained overload, where requests sent while tokens are queued enter the engine
earlier in kvsim and their tokens leave correspondingly later. A token whose backlog ends just
as an ingress begins waits for that ingress (priority): such knife edges move single tokens by
one ingress time, not totals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Capacity:
    """One server's free capacity ``C(t) = t - (ingress busy time before t)`` and its inverse."""

    start: np.ndarray     # ingress busy intervals [start, end), sorted, disjoint
    length: np.ndarray
    before: np.ndarray    # busy time before interval j (len + 1: the total last)

    @classmethod
    def of(cls, start: np.ndarray, end: np.ndarray) -> Capacity:
        length = end - start
        return cls(start, length, np.concatenate(([0.0], np.cumsum(length))))

    def at(self, t: np.ndarray) -> np.ndarray:
        if not len(self.start):
            return np.asarray(t, np.float64)
        j = np.searchsorted(self.start, t, "right") - 1
        jj = np.maximum(j, 0)
        busy = np.where(j >= 0, self.before[jj] + np.minimum(t - self.start[jj], self.length[jj]), 0.0)
        return t - busy

    def when(self, y: np.ndarray) -> np.ndarray:
        """The first time the free capacity reaches ``y`` (work done just before a busy interval
        is done at its start)."""
        k = np.searchsorted(self.start - self.before[:-1], y, "left")
        return y + self.before[k]


def _events(f: np.ndarray, e: np.ndarray, n: np.ndarray, w1: float, token_s: float, end_s: float,
            cap: Capacity) -> tuple[np.ndarray, ...]:
    """Every event of one server in (time, request) order: (time, jump, slope change, index of the
    event among the requests' events). Laid out as the ingress edges, then per request its first
    and its last token, so one stable sort on time keeps ties in that order (edges first, then by
    request, first before last). A request that did not finish gets an empty last event."""
    done = e >= 0
    ramp = np.where(done & (n > 2), (n - 2) * token_s, 0.0)
    span = np.where(done, e - f, 0.0)
    slope = np.where(span > 0, ramp / np.where(span > 0, span, 1.0), 0.0)
    last = np.where(done, np.where(n >= 2, token_s, 0.0) + end_s + np.where(span > 0, 0.0, ramp), 0.0)
    edges = np.concatenate((cap.start, cap.start + cap.length))
    t, jump, dslope = (np.empty(len(edges) + 2 * len(f)) for _ in range(3))
    t[:len(edges)], jump[:len(edges)], dslope[:len(edges)] = edges, 0.0, 0.0
    req_t, req_jump, req_slope = t[len(edges):], jump[len(edges):], dslope[len(edges):]
    req_t[0::2], req_t[1::2] = f, np.where(done, e, f)
    req_jump[0::2], req_jump[1::2] = w1, last
    req_slope[0::2], req_slope[1::2] = slope, -slope
    order = np.argsort(t, kind="stable")
    return t[order], jump[order], dslope[order], order - len(edges)


def deliver_server(f: np.ndarray, e: np.ndarray, n: np.ndarray, cap: Capacity, w1: float, token_s: float,
                   end_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(client first-token time, client finish time) of one server's requests; ``e < 0``: the
    request did not finish (no finish, NaN)."""
    t, jump, dslope, slot = _events(f, e, n, w1, token_s, end_s, cap)
    slope = np.maximum(np.cumsum(dslope), 0.0)
    dt = np.diff(t, prepend=t[0])
    arrived = np.concatenate(([0.0], slope[:-1])) * dt
    c = cap.at(t)
    z = np.cumsum(arrived - np.diff(c, prepend=c[0]) + jump)
    backlog = z - np.minimum(0.0, np.minimum.accumulate(z - jump))
    out = np.empty(2 * len(f))
    mine = slot >= 0
    out[slot[mine]] = cap.when(c[mine] + backlog[mine])
    first, finish = out[0::2], np.where(e >= 0, out[1::2], np.nan)
    return first, finish


def deliver(first_s: np.ndarray, finish_s: np.ndarray, n_out: np.ndarray, server: np.ndarray,
            busy: tuple[tuple[np.ndarray, np.ndarray], ...], w1: float, token_s: float,
            end_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Client first-token and finish times of every request (uid order): NaN where the engine
    gave none (``first_s`` / ``finish_s`` < 0)."""
    first, finish = np.full(len(first_s), np.nan), np.full(len(first_s), np.nan)
    for k, (start, end) in enumerate(busy):
        m = np.flatnonzero((server == k) & (first_s >= 0))
        if len(m):
            first[m], finish[m] = deliver_server(first_s[m], finish_s[m], n_out[m], Capacity.of(start, end),
                                                 w1, token_s, end_s)
    return first, finish
