"""A run of quiet steps laid out as arrays: blocks taken, context tokens, step times and ends.

:meth:`QuietRuns._build <sim.engine.fastforward.runs.QuietRuns._build>` asks for the arrays of
a run of ``H`` quiet steps from window step ``s``, whose decoders' buckets take ``n`` blocks at
offsets ``j0, j0 + B, ...`` (``firsts``)::

    cum    int64[H]     blocks taken by steps 1..o           (o = 1..H, index o - 1)
    ctx    int64[H]     the decoders' context tokens after step o: decoders o + ctx0
    dts    float64[H+1] p_dt, then dt_o = time(ctx, pages + cum)   (sim/cost/bulk.py)
    ends   float64[H+2] p_start, t, t + dt_1, ...                  (sequential float sums)
    busy   float64[H+1] busy0, then the busy time after each step (the records' durations)

Two implementations give the same values bit for bit: :func:`lay_out_numpy`, about 25 numpy
calls (the reference), and the compiled ``_run_layout.c``, one pass in C, built by ``pip
install`` where a C compiler is (optional). The compiled one runs when it was built, the cost
model has folded decode terms, and ``KVSIM_PURE_PYTHON`` is unset. A run is laid out once per
request in a day on many replicas, where numpy's per-call overhead on arrays of a few hundred
steps is most of the cost of a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from sim.compiled import compiled
from sim.cost.bulk import DecodeTerms, DecodeTimeArray


class RunArrays(NamedTuple):
    cum: np.ndarray
    ctx: np.ndarray
    dts: np.ndarray
    ends: np.ndarray
    busy: np.ndarray


COMPILED = compiled("sim.engine.fastforward._run_layout")  # tests set it to None to compare both


def lay_out_numpy(H: int, B: int, firsts: list[tuple[int, int]], decoders: int, ctx0: int, pages: int,
                  times: DecodeTimeArray, p_dt: float, p_start: float, t: float, busy0: float,
                  lag: int) -> RunArrays:
    """The run's arrays with numpy (the reference; module docstring)."""
    o = np.arange(1, H + 1)  # run offsets: step s + o
    if len(firsts) == 1:  # one bucket (a lone decoder, say): n blocks at j0, j0 + B, ...
        (j0, n), = firsts
        cum = o + (B - j0)  # blocks taken by steps s+1 .. s+o: n (o - j0 + B) // B
        cum //= B
        if n != 1:
            cum *= n
    else:
        pops = np.zeros(B, np.int64)
        for j0, n in firsts:
            pops[j0 - 1] = n
        cum = np.add.accumulate(np.resize(pops, H))
    ctx = decoders * o
    ctx += ctx0
    # one slot before each column: the step in flight's (async records lag a step; RunRows)
    dts, ends = np.empty(H + 1), np.empty(H + 2)
    dts[0], dts[1:] = p_dt, times(ctx, pages + cum)
    dt, T = dts[1:], ends[1:]
    ends[0], T[0], T[1:] = p_start, t, dt
    np.add.accumulate(T, out=T)  # T[j]: end of step j (sequential sums, as t += dt)
    busy = np.empty(H + 1)
    busy[0], busy[1:] = busy0, dts[1 - lag:H + 1 - lag]  # RunRows.durations(0, H)
    np.add.accumulate(busy, out=busy)
    return RunArrays(cum, ctx, dts, ends, busy)


def lay_out_run(H: int, B: int, firsts: list[tuple[int, int]], decoders: int, ctx0: int, pages: int,
                times: DecodeTimeArray, p_dt: float, p_start: float, t: float, busy0: float,
                lag: int) -> RunArrays:
    """The run's arrays: compiled where it can be, else :func:`lay_out_numpy`."""
    terms: DecodeTerms | None = getattr(times, "terms", None)
    fill: Callable[..., None] | None = getattr(COMPILED, "lay_out", None)
    if fill is None or terms is None:
        return lay_out_numpy(H, B, firsts, decoders, ctx0, pages, times, p_dt, p_start, t, busy0, lag)
    out = RunArrays(np.empty(H, np.int64), np.empty(H, np.int64), np.empty(H + 1), np.empty(H + 2),
                    np.empty(H + 1))
    fill(*out, firsts, B, decoders, ctx0, pages, terms, p_dt, p_start, t, busy0, lag)
    return out
