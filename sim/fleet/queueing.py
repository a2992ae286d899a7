"""Queueing formulas: Erlang-C (M/M/c), M/D/1 and M/D/c waiting probabilities.

Used as test oracles and as a sanity column, not as the answer (capacity-planning.md 2.7):
they ignore prefill/decode interference and preemption.

M/D/c (deterministic service ``D``, ``c`` servers, Poisson rate ``lam``): every customer in
service at time t leaves by t + D, waiting ones start by t + D and are still there, so the
number in system obeys ``Q(t + D) = max(Q(t) - c, 0) + A`` with ``A ~ Poisson(lam D)`` for
*every* t. Its stationary law is the time-average law, which Poisson arrivals see (PASTA), so
``P(wait) = P(Q >= c)`` and, FCFS, ``P(W <= k D) = P(Q <= (k + 1) c - 1)`` (Crommelin).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.stats import poisson


def erlang_c(c: int, a: float) -> float:
    """P(an arrival waits) in M/M/c with offered load ``a = lam x E[S]`` (1 if unstable)."""
    if a >= c:
        return 1.0
    term, s = 1.0, 1.0  # a^k / k!, summed for k < c
    for k in range(1, c):
        term *= a / k
        s += term
    last = term * a / c * c / (c - a)  # a^c / c! x c / (c - a)
    return last / (s + last)


def mmc_wait_tail(c: int, lam: float, mean_s: float, t: float) -> float:
    """P(W > t) in M/M/c: C(c, a) exp(-(c mu - lam) t)."""
    a = lam * mean_s
    if a >= c:
        return 1.0
    return erlang_c(c, a) * math.exp(-(c / mean_s - lam) * t)


def mdc_queue_dist(c: int, lam: float, d: float, qmax: int | None = None, iters: int = 5000) -> np.ndarray:
    """Stationary P(Q = q), q = 0..qmax, of the M/D/c number-in-system chain (see module doc)."""
    a = lam * d
    if a >= c:
        raise ValueError(f"unstable: lam x D = {a:g} >= c = {c}")
    qmax = qmax or int(c + a + 12 * math.sqrt(a + 1) + 60)
    arr = poisson.pmf(np.arange(qmax + 1), a)
    p = np.zeros(qmax + 1)
    p[0] = 1.0
    for _ in range(iters):
        base = np.zeros(qmax + 1)
        base[0] = p[: c + 1].sum()
        base[1: qmax + 1 - c] = p[c + 1:]
        new = np.convolve(base, arr)[: qmax + 1]
        new /= new.sum()
        if np.abs(new - p).max() < 1e-13:
            return new
        p = new
    return p


def mdc_wait_prob(c: int, lam: float, d: float) -> float:
    """P(an arrival waits) in M/D/c."""
    if lam * d >= c:
        return 1.0
    return float(mdc_queue_dist(c, lam, d)[c:].sum())


def md1_wait_cdf(lam: float, d: float, t: float) -> float:
    """P(W <= t) in M/D/1 (Erlang's formula), exact for 0 <= t <= ~20 D.

    The alternating sum loses precision for larger t/D; use :func:`mdc_queue_dist` there.
    """
    rho = lam * d
    if rho >= 1:
        return 0.0
    total = 0.0
    for k in range(math.floor(t / d) + 1):
        x = lam * (k * d - t)  # <= 0
        total += x**k / math.factorial(k) * math.exp(-x)
    return min(1.0, max(0.0, (1 - rho) * total))


def max_rate(ok: Callable[[float], bool], hi: float, tol: float = 1e-6) -> float:
    """Largest rate in (0, hi) for which ``ok(rate)`` holds, by bisection (ok is monotone)."""
    lo = 0.0
    while hi - lo > tol * max(hi, 1e-9):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
