"""Arrival processes. Every function draws only from the ``rng`` it is given.

Rate curves use time rescaling: points of a unit-rate renewal process (exponential gaps, or
Gamma gaps for ``cv != 1``) are mapped through the inverse of the cumulative rate
``Lambda(t) = integral of rate``, which yields a non-homogeneous process with that rate.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from sim.errors import ConfigError
from workloads.gen import spec as S

RateFn = Callable[[np.ndarray], np.ndarray]


def _unit_gaps(rng: np.random.Generator, n: int, cv: float) -> np.ndarray:
    """``n`` gaps with mean 1 and coefficient of variation ``cv``."""
    if cv == 1.0:
        return rng.exponential(1.0, n)
    k = 1.0 / cv**2
    return rng.gamma(k, 1.0 / k, n)


def renewal(rng: np.random.Generator, rate: float, cv: float, n: int | None, horizon: float | None) -> np.ndarray:
    """Arrival times of a renewal process, stopping at ``n`` points or at ``horizon``."""
    if n is not None:
        t = np.cumsum(_unit_gaps(rng, n, cv)) / rate
        return t[t < horizon] if horizon is not None else t
    assert horizon is not None
    parts, last = [], 0.0
    while True:
        m = int(rate * horizon * 1.05 + 10 * np.sqrt(rate * horizon) + 16)
        t = last + np.cumsum(_unit_gaps(rng, m, cv)) / rate
        parts.append(t[t < horizon])
        if t[-1] >= horizon:
            return np.concatenate(parts)
        last = float(t[-1])


def _piecewise_fn(a: S.Piecewise) -> RateFn:
    ts = np.array([p[0] for p in a.points])
    rs = np.array([p[1] for p in a.points])

    def fn(t: np.ndarray) -> np.ndarray:
        if a.period_s is not None:
            t = np.mod(t, a.period_s)
        if a.interpolate == "linear":
            return np.interp(t, ts, rs)
        return rs[np.searchsorted(ts, t, side="right") - 1]
    return fn


def _sinusoid_fn(a: S.Sinusoid) -> RateFn:
    return lambda t: a.mean_rate * (1 + a.amplitude * np.sin(2 * np.pi * (t + a.phase_s) / a.period_s))


def _trace_fn(a: S.TraceRate) -> RateFn:
    from workloads.loader import load_trace

    t = load_trace(a.path, a.format).df["arrival_s"].to_numpy()
    counts = np.bincount((t // a.bin_s).astype(np.int64)) / a.bin_s * a.scale
    period = len(counts) * a.bin_s
    return lambda x: counts[(np.mod(x, period) // a.bin_s).astype(np.int64)]


def rate_function(a: S.Piecewise | S.Sinusoid | S.TraceRate) -> RateFn:
    if isinstance(a, S.Piecewise):
        return _piecewise_fn(a)
    if isinstance(a, S.Sinusoid):
        return _sinusoid_fn(a)
    return _trace_fn(a)


def modulated(rng: np.random.Generator, fn: RateFn, cv: float, n: int | None, horizon: float | None) -> np.ndarray:
    """Non-homogeneous arrivals with rate ``fn(t)`` by time rescaling on a fine grid."""
    h = horizon if horizon is not None else 3600.0
    while True:
        dt = min(1.0, h / 20000)
        grid = np.arange(0.0, h + dt, dt)
        lam = np.maximum(fn(grid), 0.0)
        cum = np.concatenate([[0.0], np.cumsum((lam[1:] + lam[:-1]) / 2 * dt)])
        if horizon is not None or (n is not None and cum[-1] > n * 1.2 + 10 * np.sqrt(n) + 16):
            break
        if h > 1e9:
            raise ConfigError("arrivals: the rate curve is (almost) zero; num_requests is never reached")
        h *= 4
    s = renewal(rng, 1.0, cv, n, float(cum[-1]))
    if n is None and cum[-1] == 0:
        return np.zeros(0)
    t = np.interp(s, cum, grid)
    return t if horizon is None else t[t < horizon]


def closed_loop(rng: np.random.Generator, a: S.ClosedLoop, n: int | None, horizon: float | None,
                ) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times and client ids. With zero latency each client is a renewal process."""
    # enough per client that the n-th arrival overall never outruns any single client
    per_client = int(1.5 * np.ceil(n / a.clients)) + 20 if n is not None else None
    times, ids = [], []
    for c in range(a.clients):
        t0 = a.think_time_s * _unit_gaps(rng, 1, a.think_cv)[0]  # clients start out of phase
        if per_client is not None:
            gaps = a.latency_s + a.think_time_s * _unit_gaps(rng, per_client - 1, a.think_cv)
            t = t0 + np.concatenate([[0.0], np.cumsum(gaps)])
        else:
            assert horizon is not None
            mean_cycle = a.latency_s + a.think_time_s
            m = int(horizon / mean_cycle * 1.2 + 10 * np.sqrt(horizon / mean_cycle) + 16)
            t = t0 + np.concatenate([[0.0], np.cumsum(a.latency_s + a.think_time_s * _unit_gaps(rng, m, a.think_cv))])
            while t[-1] < horizon:
                more = np.cumsum(a.latency_s + a.think_time_s * _unit_gaps(rng, m, a.think_cv))
                t = np.concatenate([t, t[-1] + more])
        if horizon is not None:
            t = t[t < horizon]
        times.append(t)
        ids.append(np.full(len(t), c, dtype=np.int64))
    all_t, all_c = np.concatenate(times), np.concatenate(ids)
    order = np.argsort(all_t, kind="stable")
    all_t, all_c = all_t[order], all_c[order]
    if n is not None:
        all_t, all_c = all_t[:n], all_c[:n]
    return all_t, all_c


def arrivals(rng: np.random.Generator, a: S.Arrivals, n: int | None, horizon: float | None,
             ) -> tuple[np.ndarray, np.ndarray | None]:
    """Times of ``n`` (or all before ``horizon``) arrivals, and client ids for closed loops."""
    if isinstance(a, S.ClosedLoop):
        return closed_loop(rng, a, n, horizon)
    if isinstance(a, S.Poisson):
        return renewal(rng, a.rate, 1.0, n, horizon), None
    if isinstance(a, S.Gamma):
        return renewal(rng, a.rate, a.cv, n, horizon), None
    return modulated(rng, rate_function(a), a.cv, n, horizon), None


def per_bin_rate(t: np.ndarray, bin_s: float) -> pd.Series:
    """Helper for checks: arrivals per second in ``bin_s`` bins from 0."""
    return pd.Series(np.bincount((t // bin_s).astype(np.int64)) / bin_s)
