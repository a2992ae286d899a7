# cython: boundscheck=False, wraparound=False, cdivision=True
"""A run of quiet steps laid out as arrays: blocks taken, context tokens, step times and ends.

:meth:`QuietRuns._build <sim.engine.fastforward.runs.QuietRuns._build>` asks for the arrays of
a run of ``H`` quiet steps from window step ``s``, whose decoders' buckets take ``n`` blocks at
offsets ``j0, j0 + B, ...`` (``firsts``)::

    cum    int64[H]     blocks taken by steps 1..o           (o = 1..H, index o - 1)
    ctx    int64[H]     the decoders' context tokens after step o: decoders o + ctx0
    dts    float64[H+1] p_dt, then dt_o = time(ctx, pages + cum)   (sim/cost/decode_time.py)
    ends   float64[H+2] p_start, t, t + dt_1, ...                  (sequential float sums)
    busy   float64[H+1] busy0, then the busy time after each step (the records' durations)

One pass, step by step (:func:`fill`). Compiled by Cython where a C compiler is
(``run_layout.pxd``: C ints and doubles, the step time a C call, no fused multiply-add;
``setup.py``), else it runs as this Python, the same floats. A run is laid out once per request
in a day on many replicas, on arrays of a few hundred steps: numpy's ~25 calls a run were most
of its cost, the compiled loop is not.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.cost.bulk import DecodeTerms
from sim.cost.decode_time import step_time


class RunArrays(NamedTuple):
    cum: np.ndarray
    ctx: np.ndarray
    dts: np.ndarray
    ends: np.ndarray
    busy: np.ndarray


def fill(cum: np.ndarray, ctx: np.ndarray, dts: np.ndarray, ends: np.ndarray, busy: np.ndarray,
         pops: np.ndarray, decoders: int, ctx0: int, pages: int, k: DecodeTerms, p_dt: float, p_start: float,
         t: float, busy0: float, lag: int) -> None:
    """Write the run's arrays (module docstring; ``H = len(cum)``, ``pops[i % B]`` the blocks
    step ``i + 1`` takes), allocated by the caller at their lengths."""
    H, B = len(cum), len(pops)
    if len(ctx) < H or len(dts) < H + 1 or len(ends) < H + 2 or len(busy) < H + 1 or B < 1 or lag not in (0, 1):
        raise ValueError("run layout: arrays too short, no pops, or a lag not 0 or 1")
    dense, eta_attn, head, a_kv, a_fl, a_pg, roof, floor, tail, sched, is_async = k
    c = 0
    dts[0] = p_dt
    ends[0] = p_start
    ends[1] = t
    for i in range(H):
        c += pops[i % B]
        cum[i] = c
        x = decoders * (i + 1) + ctx0
        ctx[i] = x
        dt = step_time(dense, eta_attn, head, a_kv, a_fl, a_pg, roof, floor, tail, sched, is_async, x, pages + c)
        dts[i + 1] = dt
        ends[i + 2] = ends[i + 1] + dt
    busy[0] = busy0
    for i in range(H):
        busy[i + 1] = busy[i] + dts[i + 1 - lag]


def lay_out_run(H: int, B: int, firsts: list[tuple[int, int]], decoders: int, ctx0: int, pages: int,
                terms: DecodeTerms, p_dt: float, p_start: float, t: float, busy0: float,
                lag: int) -> RunArrays:
    """The run's arrays (module docstring): bucket ``(j0, n)`` of ``firsts`` takes ``n`` blocks
    at offsets ``j0, j0 + B, ...``; ``terms`` time the steps; ``lag`` 1 for async scheduling
    (the records' durations lag a step)."""
    pops = np.zeros(B, np.int64)
    for j0, n in firsts:
        if not 1 <= j0 <= B:
            raise ValueError("run layout: a bucket's first offset is in 1..B")
        pops[j0 - 1] = n
    out = RunArrays(np.empty(H, np.int64), np.empty(H, np.int64), np.empty(H + 1), np.empty(H + 2),
                    np.empty(H + 1))
    fill(*out, pops, decoders, ctx0, pages, terms, p_dt, p_start, t, busy0, lag)
    return out
