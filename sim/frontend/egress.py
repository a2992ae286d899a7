"""Egress: after every engine step, the API server streams that step's tokens to their clients.

vLLM's engine core hands its API server one batch of outputs per step (``EngineCoreOutputs``);
the server's output handler detokenizes each request's new token and writes it to that
request's stream. So egress work reaches a server in batches, at step ends::

    a request's first token         w1 = output_token_s (x 2 on the chat endpoint: a role chunk)
    each later token but the last   output_token_s
    its last token                  output_token_s + end_s (the finish chunks; end_s alone if
                                    the first token was also the last)

A request's tokens after its first come one per step of the replica that decodes it: at that
replica's step ends strictly after the first token and before the last, at most
``output_tokens - 2`` of them (a request preempted meanwhile is charged at the steps it sat out,
so its work arrives early by those steps; the total is exact). A rejection's error reply
carries no modelled work.

All work reaching one server at one instant is one batch; it is served behind the work queued
before it (FIFO), in the time the server's ingress leaves free (ingress has preemptive
priority, :mod:`sim.frontend.ingress`, so the engine's arrival times never move), and every
chunk of it reaches its client when the whole batch is done. Between batches nothing arrives,
so the backlog after batch ``k`` (its own work ``J_k`` included) is
``B_k = max(0, B_{k-1} - free_k) + J_k``, solved at once by running sums, and batch ``k`` is
delivered at ``C^-1(C(t_k) + B_k)``, where ``C(t) = t - ingress busy time before t``.

Causal: a delivery depends only on the work that arrived before it and on the ingress the
server runs before it is done, never on later engine events. A closed loop therefore solves
its server as the run goes, chunk by chunk (:class:`Stream` carries the backlog across), the
same arithmetic as an open loop's one chunk (:mod:`sim.frontend.live`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TIE_S = 1e-12  # seconds: a delivery and an ingress start closer than this are the same instant


@dataclass(frozen=True, slots=True)
class Capacity:
    """One server's free capacity ``C(t) = t - (ingress busy time before t)`` and its inverse."""

    start: np.ndarray     # ingress busy intervals [start, end), sorted, disjoint
    length: np.ndarray
    before: np.ndarray    # busy time before interval j (len + 1: the total last)

    @classmethod
    def of(cls, start: np.ndarray, end: np.ndarray) -> Capacity:
        start, end = np.asarray(start, np.float64), np.asarray(end, np.float64)
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
        is done at its start, within ``TIE_S``: an ingress sent the instant a chunk is delivered,
        as a closed loop's is, comes after it whatever the float sums' last bits)."""
        k = np.searchsorted(self.start - self.before[:-1], y - TIE_S, "left")
        return y + self.before[k]


@dataclass(slots=True)
class Stream:
    """One server's egress queue, carried from one chunk of batches to the next."""

    t: float = -math.inf   # the last batch solved
    backlog: float = 0.0   # the work left at ``t``, that batch's included

    def solve(self, cap: Capacity, times: np.ndarray, work: np.ndarray) -> np.ndarray:
        """Delivery time of each batch (``times`` increasing, after :attr:`t`). ``cap`` must hold
        every ingress interval that ends after :attr:`t` and starts before the last delivery."""
        if not len(times):
            return np.zeros(0)
        carried = self.t > -math.inf
        if carried:
            times, work = np.concatenate(([self.t], times)), np.concatenate(([self.backlog], work))
        c = cap.at(times)
        z = np.cumsum(work - np.diff(c, prepend=c[0]))
        backlog = z - np.minimum(0.0, np.minimum.accumulate(z - work))
        out = cap.when(c + backlog)
        self.t, self.backlog = float(times[-1]), float(backlog[-1])
        return out[1:] if carried else out


def middle_counts(ends: np.ndarray, k0: int, k1: int, first: np.ndarray, finish: np.ndarray,
                  n: np.ndarray) -> np.ndarray:
    """How many middle tokens each of the steps ``ends[k0:k1]`` of one replica streams: one per
    request (first token at ``first``, last at ``finish``, inf while running; ``n`` output
    tokens) at each step end after its first token and before its last, at most ``n - 2``."""
    lo = np.searchsorted(ends, first, "right")
    hi = np.minimum(lo + np.maximum(n - 2, 0), np.searchsorted(ends, finish, "left"))
    a, b = np.clip(lo, k0, k1) - k0, np.clip(np.maximum(hi, lo), k0, k1) - k0
    d = np.bincount(a, minlength=k1 - k0 + 1) - np.bincount(b, minlength=k1 - k0 + 1)
    return np.cumsum(d)[:-1].astype(np.float64)


def batches(times: list[np.ndarray], work: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The server's batches: its distinct arrival instants (increasing) and the work of each."""
    t = np.concatenate(times) if times else np.zeros(0)
    u, inv = np.unique(t, return_inverse=True)
    return u, np.bincount(inv, weights=np.concatenate(work) if work else None, minlength=len(u))


def last_work(n: np.ndarray, token_s: float, end_s: float) -> np.ndarray:
    """The last chunk's work: its token (unless the first token was the last) and the close."""
    return np.where(n >= 2, token_s, 0.0) + end_s


def deliver(first_s: np.ndarray, finish_s: np.ndarray, n_out: np.ndarray, n_max: np.ndarray,
            server: np.ndarray, busy: tuple[tuple[np.ndarray, np.ndarray], ...], replica: np.ndarray,
            ends: list[np.ndarray], w1: float, token_s: float, end_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Client first-token and finish times of every request (uid order) of a run, in one chunk:
    NaN where the engine gave none (``first_s`` / ``finish_s`` < 0). ``replica``: the index into
    ``ends`` (each replica's step ends) of the replica that decoded each request; ``n_max`` its
    ``output_tokens``."""
    first, finish = np.full(len(first_s), np.nan), np.full(len(first_s), np.nan)
    for k, (start, end) in enumerate(busy):
        m = np.flatnonzero((server == k) & (first_s >= 0))
        if not len(m):
            continue
        f, e = first_s[m], np.where(finish_s[m] >= 0, finish_s[m], math.inf)
        done = np.isfinite(e)
        ts, ws = [f, e[done]], [np.full(len(m), w1), last_work(n_out[m][done], token_s, end_s)]
        for r, at in enumerate(ends):
            mine = replica[m] == r
            if mine.any() and len(at):
                c = middle_counts(at, 0, len(at), f[mine], e[mine], n_max[m][mine])
                ts.append(at[c > 0])
                ws.append(token_s * c[c > 0])
        u, work = batches(ts, ws)
        d = Stream().solve(Capacity.of(start, end), u, work)
        first[m] = d[np.searchsorted(u, f)]
        finish[m[done]] = d[np.searchsorted(u, e[done])]
    return first, finish
