"""Interpolation in measured kernel-time grids (mechanism only; sim/cost/kernel_tables.py is the API).

Everything happens in log space and on the **achieved rate** (work / time), where work is the
operator's FLOPs or bytes at a point::

    log rate = log work - log time

Inside a grid, multilinear interpolation of log rate equals that of log time (log work is linear
in the log coordinates), so a measured point comes back exactly and a value between two
neighbours lies between them. The rate only matters at the edges:

- above a grid's largest size the rate is held (time grows with the work: a saturated kernel);
- below its smallest size the size is clamped to the edge (a smaller problem is never slower
  than padding it up to the smallest one measured, and a launch-bound kernel is not faster).

Both say ``extrapolated``. Times are first made non-decreasing along the size axes by least
squares in log time (isotonic regression, pool adjacent violators: unbiased, where a running
minimum would keep every downward blip), so noise never makes a bigger batch cheaper than a
smaller one; a measured point that is not out of order with its neighbours comes back exactly.

Pure Python on tuples: one lookup is a few bisections and at most eight corners (~5 µs), so
the cost model can call it per step without numpy's per-call overhead.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def bracket(axis: Sequence[float], x: float) -> tuple[int, float, bool]:
    """(i, f, above): x lies f of the way from axis[i] to axis[i + 1]; x >= axis[0] assumed.

    Above the last point f is clamped to 1 (the caller holds the rate there).
    """
    n = len(axis)
    if n == 1:
        return 0, 0.0, x > axis[0] + 1e-12
    if x >= axis[-1]:
        return n - 2, 1.0, x > axis[-1] + 1e-12
    i = max(0, bisect_right(axis, x) - 1)
    return i, (x - axis[i]) / (axis[i + 1] - axis[i]), False


def clamp_low(axis: Sequence[float], x: float) -> tuple[float, bool]:
    """x raised to the axis' first point, and whether it had to be."""
    return (axis[0], True) if x < axis[0] - 1e-12 else (x, False)


def suffix_min(log_t: np.ndarray) -> np.ndarray:
    """Least time over every point at least as large along every axis (NaN = not measured)."""
    out = np.where(np.isnan(log_t), np.inf, log_t)
    for ax in range(out.ndim):
        flipped = np.flip(out, axis=ax)
        out = np.flip(np.minimum.accumulate(flipped, axis=ax), axis=ax)
    return np.where(np.isnan(log_t), np.nan, out)


@dataclass(frozen=True, slots=True)
class Curve:
    """Log rate over one log-size axis (one row of a ragged grid, or a whole 1-D table)."""

    xs: tuple[float, ...]
    lr: tuple[float, ...]

    def at(self, x: float) -> tuple[float, bool]:
        i, f, above = bracket(self.xs, x)
        if f == 0.0:
            return self.lr[i], above
        return self.lr[i] + f * (self.lr[i + 1] - self.lr[i]), above


@dataclass(frozen=True, slots=True)
class Ragged:
    """Log rate over (outer, inner) log axes where each outer row measured its own inner range.

    Attention tables stop short of large batch x long sequence (memory): a row beyond its own
    largest batch holds that row's rate, and says extrapolated.
    """

    outer: tuple[float, ...]
    rows: tuple[Curve, ...]

    def at(self, outer: float, inner: float) -> tuple[float, bool]:
        i, f, above = bracket(self.outer, outer)
        lo, ext_lo = self.rows[i].at(inner)
        if f == 0.0:
            return lo, above or ext_lo
        hi, ext_hi = self.rows[i + 1].at(inner)
        return lo + f * (hi - lo), above or ext_lo or ext_hi


def ragged(outer: np.ndarray, inner: np.ndarray, log_t: np.ndarray, log_w: np.ndarray) -> Ragged:
    """Build from flat measured points (log coordinates, log time, log work at each point)."""
    os_ = np.unique(outer)
    is_ = np.unique(inner)
    grid = np.full((len(os_), len(is_)), np.nan)
    work = np.full_like(grid, np.nan)
    oi = np.searchsorted(os_, outer)
    ii = np.searchsorted(is_, inner)
    grid[oi, ii] = log_t
    work[oi, ii] = log_w
    lr = work - monotone(grid)
    rows = []
    for r in range(len(os_)):
        ok = ~np.isnan(lr[r])
        rows.append(Curve(tuple(is_[ok].tolist()), tuple(lr[r][ok].tolist())))
    keep = [r for r in range(len(os_)) if rows[r].xs]
    return Ragged(tuple(os_[keep].tolist()), tuple(rows[r] for r in keep))


def curve(x: np.ndarray, log_t: np.ndarray, log_w: np.ndarray) -> Curve:
    order = np.argsort(x, kind="mergesort")
    t = monotone(log_t[order])
    return Curve(tuple(x[order].tolist()), tuple((log_w[order] - t).tolist()))


@dataclass(frozen=True, slots=True)
class Grid3:
    """Log rate on a full (a, b, c) log grid: the GEMM table's (m, n, k)."""

    a: tuple[float, ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    lr: tuple[tuple[tuple[float, ...], ...], ...]

    def at(self, a: float, b: float, c: float) -> tuple[float, bool]:
        i, fa, ea = bracket(self.a, a)
        j, fb, eb = bracket(self.b, b)
        k, fc, ec = bracket(self.c, c)
        v = self.lr
        i1, j1, k1 = min(i + 1, len(self.a) - 1), min(j + 1, len(self.b) - 1), min(k + 1, len(self.c) - 1)
        c00 = v[i][j][k] + fc * (v[i][j][k1] - v[i][j][k])
        c01 = v[i][j1][k] + fc * (v[i][j1][k1] - v[i][j1][k])
        c10 = v[i1][j][k] + fc * (v[i1][j][k1] - v[i1][j][k])
        c11 = v[i1][j1][k] + fc * (v[i1][j1][k1] - v[i1][j1][k])
        c0 = c00 + fb * (c01 - c00)
        c1 = c10 + fb * (c11 - c10)
        return c0 + fa * (c1 - c0), ea or eb or ec


def fill_holes(log_t: np.ndarray) -> np.ndarray:
    """Unmeasured cells of a nearly full grid (a handful per GEMM dtype) from their neighbours.

    Each pass fills a hole with the mean of its measured neighbours along every axis (log time),
    which for an isolated hole is linear interpolation in the log coordinates of a uniform grid.
    """
    out = log_t.copy()
    while np.isnan(out).any():
        acc = np.zeros_like(out)
        cnt = np.zeros_like(out)
        for ax in range(out.ndim):
            for shift in (1, -1):
                nb = np.roll(out, shift, axis=ax)
                edge = [slice(None)] * out.ndim
                edge[ax] = slice(0, 1) if shift == 1 else slice(-1, None)
                nb[tuple(edge)] = np.nan
                ok = ~np.isnan(nb)
                acc[ok] += nb[ok]
                cnt[ok] += 1
        hole = np.isnan(out) & (cnt > 0)
        if not hole.any():
            break
        out[hole] = acc[hole] / cnt[hole]
    return out


def grid3(m: np.ndarray, n: np.ndarray, k: np.ndarray, log_t: np.ndarray) -> Grid3:
    """GEMM grid from flat log (m, n, k, time); work = 2 m n k."""
    am, an, ak = np.unique(m), np.unique(n), np.unique(k)
    t = np.full((len(am), len(an), len(ak)), np.nan)
    t[np.searchsorted(am, m), np.searchsorted(an, n), np.searchsorted(ak, k)] = log_t
    t = isotonic(fill_holes(t), 0)
    lw = math.log(2.0) + am[:, None, None] + an[None, :, None] + ak[None, None, :]
    lr = lw - t
    return Grid3(tuple(am.tolist()), tuple(an.tolist()), tuple(ak.tolist()),
                 tuple(tuple(tuple(row.tolist()) for row in plane) for plane in lr))


def _pav(y: list[float]) -> list[float]:
    """Least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in y:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks[-1]
            blocks[-1] = [(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2]
    out: list[float] = []
    for m, c in blocks:
        out.extend([m] * int(c))
    return out


def isotonic(log_t: np.ndarray, axis: int) -> np.ndarray:
    """Non-decreasing along `axis` by least squares in log time, per line, NaNs skipped."""
    out = np.moveaxis(log_t.copy(), axis, -1)
    flat = out.reshape(-1, out.shape[-1])
    for line in flat:
        ok = ~np.isnan(line)
        if ok.sum() > 1:
            line[ok] = _pav(line[ok].tolist())
    return np.moveaxis(flat.reshape(out.shape), -1, axis)


def monotone(log_t: np.ndarray) -> np.ndarray:
    """Non-decreasing along every axis: least squares along each axis in turn (unbiased, unlike a
    running minimum), then the padding bound (suffix_min) for what the passes leave."""
    out = log_t
    for ax in range(log_t.ndim):
        out = isotonic(out, ax)
    return suffix_min(out)
