"""Length marginals as quantile functions of a uniform ``u``, joined by a Gaussian copula.

Sampling every marginal through its quantile function lets one correlated normal pair drive
prompt and output lengths with any marginals: the marginals stay exact and the rank
correlation is ``6/pi * asin(rho/2)`` for copula correlation ``rho``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from scipy.special import ndtr, ndtri

from workloads.gen import spec as S


@cache
def _empirical_values(path: str, fmt: str | None, column: str) -> np.ndarray:
    from workloads.loader import load_trace

    return np.sort(load_trace(path, fmt).df[column].to_numpy())


@cache
def _zipf_cdf(a: float, lo: int, hi: int) -> np.ndarray:
    k = np.arange(lo, hi + 1, dtype="float64")
    w = k ** -a
    return np.cumsum(w) / w.sum()


def quantile(spec: S.Lengths, u: np.ndarray, column: str) -> np.ndarray:
    """Integer lengths >= 1 at probabilities ``u`` in [0, 1)."""
    if isinstance(spec, S.Fixed):
        return np.full(len(u), spec.value, dtype=np.int64)
    if isinstance(spec, S.Uniform):
        return spec.low + np.minimum(np.floor(u * (spec.high - spec.low + 1)), spec.high - spec.low).astype(np.int64)
    if isinstance(spec, S.LogNormal):
        z = ndtri(np.clip(u, 1e-300, 1 - 1e-16))
        return np.maximum(1, np.rint(spec.median * np.exp(spec.sigma * z))).astype(np.int64)
    if isinstance(spec, S.Zipf):
        cdf = _zipf_cdf(spec.a, spec.min, spec.max)
        return spec.min + np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1).astype(np.int64)
    vals = _empirical_values(spec.path, spec.format, spec.column or column)
    return vals[np.minimum((u * len(vals)).astype(np.int64), len(vals) - 1)]


def correlated_uniforms(rng: np.random.Generator, n: int, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Two uniform vectors whose normal scores have correlation ``rho``."""
    z = rng.standard_normal((2, n))
    z2 = rho * z[0] + np.sqrt(1 - rho * rho) * z[1]
    return ndtr(z[0]), ndtr(z2)


def choice(rng: np.random.Generator, c: int | S.Choice, n: int) -> np.ndarray:
    if isinstance(c, int):
        return np.full(n, c, dtype=np.int64)
    w = None if c.weights is None else np.asarray(c.weights) / sum(c.weights)
    return rng.choice(np.asarray(c.values, dtype=np.int64), size=n, p=w)
