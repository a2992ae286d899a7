"""Attention and MLA times from the tables: slices by head shape, grids over (length, batch).

Each table is a set of slices (one per kv dtype, window, head_dim, heads, kv_heads); a slice is
a ragged grid of measured (length, batch) points. The work behind the rate (sim/cost/kernel_grid.py):

- context: FLOPs of causal attention, 4 x batch x heads x head_dim x (query, key) pairs;
- generation: bytes of K and V read, batch x kv_len x kv_heads x head_dim x 2 x dtype bytes;
- MLA (DeepSeek-V3 modules): batch x heads x pairs (prefill), batch x kv_len (decode).

A head shape the table lacks is taken, with the same head_dim and GQA ratio, between the two
measured head counts around it (interpolated in log heads); failing that, from the nearest
measured shape, labelled extrapolated. A KV dtype the GPU was not measured with (fp8 on A100) uses
the bfloat16 rates with the work of the real dtype, labelled extrapolated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.cost.kernel_grid import Ragged, clamp_low, ragged
from sim.cost.kernel_store import LN_US, Lookup, Store, canonical_dtype

KV_BYTES = {"bfloat16": 2, "fp8": 1}
Work = Callable[[Any, Any, int, int, int], Any]  # (batch, length, heads, kv_heads, head_dim) -> work


def pairs(q_len: float, prefix: float = 0.0, window: int = 0) -> float:
    """(query, key) pairs of causal attention: query i of q_len sees prefix + i + 1 keys (<= window)."""
    lo, hi = prefix + 1, prefix + q_len            # keys seen by the first and the last query
    if window <= 0 or hi <= window:
        return q_len * (lo + hi) / 2
    if lo >= window:
        return q_len * window
    full = window - lo + 1                         # queries still below the window
    return full * (lo + window) / 2 + (q_len - full) * window


def _slice_grid(store: Store, table: str, where: dict[str, Any], length: str, work: Work) -> Ragged:
    def make() -> Ragged:
        df = store.frame(table)
        mask = np.ones(len(df), dtype=bool)
        for col, val in where.items():
            mask &= (df[col] == val).to_numpy()
        d = df[mask]
        b = d["batch"].to_numpy(float)
        s = d[length].to_numpy(float)
        w = work(b, s, where["heads"], where.get("kv_heads", 1), where.get("head_dim", 1))
        return ragged(np.log(s), np.log(b), np.log(d["us"].to_numpy(float)), np.log(w))
    grid: Ragged = store.built((table, tuple(sorted(where.items()))), make)
    return grid


def _heads(store: Store, table: str, fixed: dict[str, Any]) -> list[tuple[int, int]]:
    """Measured (heads, kv_heads) of one (dtype, window, head_dim) family (MLA: kv_heads 1)."""
    def make() -> list[tuple[int, int]]:
        df = store.frame(table)
        m = np.ones(len(df), dtype=bool)
        for col, val in fixed.items():
            m &= (df[col] == val).to_numpy()
        sub = df[m]
        kv = sub["kv_heads"] if "kv_heads" in sub else [1] * len(sub)
        return sorted({(int(h), int(k)) for h, k in zip(sub["heads"], kv, strict=True)})
    have: list[tuple[int, int]] = store.built((table, "heads", tuple(sorted(fixed.items()))), make)
    return have


def _between(cands: list[tuple[int, int]], heads: int) -> list[tuple[float, tuple[int, int]]] | None:
    """The two candidates around `heads`, weighted linearly in log heads."""
    below = [h for h in cands if h[0] < heads]
    above = [h for h in cands if h[0] > heads]
    if not (below and above):
        return None
    lo, hi = max(below), min(above)
    f = math.log(heads / lo[0]) / math.log(hi[0] / lo[0])
    return [(1.0 - f, lo), (f, hi)]


def _choose(have: list[tuple[int, int]], heads: int, kv_heads: int) -> tuple[list[tuple[float, tuple[int, int]]], bool]:
    """Measured head shapes standing in for (heads, kv_heads) with weights, and extrapolated?

    Exact; else between two measured head counts with the same kv_heads (the KV read is the
    same), else with the same GQA ratio; else the nearest shape (extrapolated).
    """
    if (heads, kv_heads) in have:
        return [(1.0, (heads, kv_heads))], False
    for same in ([h for h in have if h[1] == kv_heads], [h for h in have if h[0] * kv_heads == h[1] * heads]):
        pair = _between(same, heads)
        if pair is not None:
            return pair, False
    near = min(have, key=lambda h: (abs(math.log(h[0] / heads)) + abs(math.log(h[1] / kv_heads)), h))
    return [(1.0, near)], True


@dataclass(frozen=True, slots=True)
class Plan:
    """What one head shape's lookups read: weighted slice grids, and what was substituted."""

    grids: tuple[tuple[float, Ragged], ...]
    substituted: bool  # a dtype / window / head_dim / head shape stands in for the one asked
    note: str

    def rate(self, lx: float, lb: float) -> tuple[float, bool]:
        """Blended log rate at log length lx, log batch lb, and whether it left the grid."""
        lr, ext = 0.0, False
        for w, grid in self.grids:
            x, low_x = clamp_low(grid.outer, lx)
            y, low_y = clamp_low(grid.rows[0].xs, lb)
            r, e = grid.at(x, y)
            lr += w * r
            ext = ext or e or low_x or low_y
        return lr, ext


def plan(store: Store, table: str, length: str, work: Work, kv_dtype: str, window: int | None,
         head_dim: int | None, heads: int, kv_heads: int, extra: tuple[tuple[str, Any], ...] = ()) -> Plan:
    """The plan for one operator shape, built on first use and cached with the GPU's tables."""
    def make() -> Plan:
        fixed, note = _family(store, table, kv_dtype, window, head_dim)
        fixed.update(extra)
        chosen, ext = _choose(_heads(store, table, fixed), heads, kv_heads)
        has_kv = "kv_heads" in store.frame(table)
        grids = tuple((w, _slice_grid(store, table, {**fixed, "heads": h} | ({"kv_heads": k} if has_kv else {}),
                                      length, work)) for w, (h, k) in chosen)
        if ext:
            note += f"; head shape {chosen[0][1][0]}/{chosen[0][1][1]} stands in"
        return Plan(grids, ext or bool(note), note)
    p: Plan = store.built((table, "plan", kv_dtype, window, head_dim, heads, kv_heads, extra), make)
    return p


def _family(store: Store, table: str, kv_dtype: str, window: int | None,
            head_dim: int | None) -> tuple[dict[str, Any], str]:
    """Fixed columns of the slice family and a note on substitutions.

    A KV dtype not measured on this GPU uses the bfloat16 family; a window or head_dim not
    measured, full attention / the nearest head_dim (the work at the query's own sizes carries
    the difference).
    """
    kv = canonical_dtype(kv_dtype)
    have = store.choices(table, "kv_dtype")
    fixed: dict[str, Any] = {"kv_dtype": kv if kv in have else ("bfloat16" if "bfloat16" in have else have[0])}
    note = "" if fixed["kv_dtype"] == kv else f"; {fixed['kv_dtype']} KV rates"
    if window is not None:
        fixed["window"] = window if window in _ints(store, table, "window") else 0
        note += "" if fixed["window"] == window else f"; window {window} not measured, full-attention rates"
    if head_dim is not None:
        fixed["head_dim"] = min(_ints(store, table, "head_dim"), key=lambda d: (abs(math.log(d / head_dim)), d))
        note += "" if fixed["head_dim"] == head_dim else f"; head_dim {fixed['head_dim']} rates"
    return fixed, note


def _ints(store: Store, table: str, col: str) -> tuple[int, ...]:
    v: tuple[int, ...] = store.built((table, "ints", col),
                                     lambda: tuple(sorted(int(x) for x in store.frame(table)[col].unique())))
    return v


def _ctx_work(b: Any, s: Any, h: int, d: int, win: int) -> Any:
    return 4.0 * b * h * d * np.vectorize(pairs)(s, 0, win)


def folded(store: Store, table: str, heads: int, kv_heads: int, kv_dtype: str, window: int | None,
           head_dim: int) -> tuple[int, int, int] | None:
    """(heads', kv_heads', r) of a measured shape with the same query heads per KV head, where
    kv_heads = r x kv_heads': the attention kernels tile the work by (sequence, KV head), so ``b``
    sequences of (heads, kv_heads) are ``r b`` sequences of (heads', kv_heads') -- the same tiles,
    the same bytes and FLOPs. None when the shape is measured, or no such shape is."""
    fixed, _ = _family(store, table, kv_dtype, window, head_dim)
    have = _heads(store, table, fixed)
    if (heads, kv_heads) in have or heads % kv_heads:
        return None
    g = heads // kv_heads
    fits = [(h, k) for h, k in have if h == g * k and kv_heads % k == 0]
    if not fits:
        return None
    h, k = max(fits)
    return h, k, kv_heads // k


def context(store: Store, batch: int, q_len: int, heads: int, kv_heads: int, head_dim: int,
            prefix: int = 0, kv_dtype: str = "bfloat16", window: int = 0) -> Lookup:
    """Causal prefill of q_len tokens per sequence after `prefix` cached ones.

    The table has no prefix: a chunk runs at the rate of a full prefill of prefix + q_len tokens
    (the same keys per query tile), and is never faster than decoding one token over that KV.
    """
    table = "context_attention"
    f = folded(store, table, heads, kv_heads, kv_dtype, window, head_dim)
    if f is not None:  # e.g. an MHA model's 32/32 as 4 x the sequences of a measured 8/8
        return context(store, batch * f[2], q_len, f[0], f[1], head_dim, prefix, kv_dtype, window)
    win = window if window in _ints(store, table, "window") else 0
    p = plan(store, table, "q_len", lambda b, s, h, _k, d: _ctx_work(b, s, h, d, win),
             kv_dtype, window, head_dim, heads, kv_heads)
    total = q_len + prefix
    lr, ext = p.rate(math.log(total), math.log(batch))
    lw = math.log(4.0 * batch * heads * head_dim * pairs(q_len, prefix, window))
    seconds, ext, note = math.exp(lw - lr + LN_US), ext or p.substituted, p.note
    if prefix > 0 and store.has("generation_attention"):
        floor = generation(store, batch, total, heads, kv_heads, head_dim, kv_dtype, window)
        if floor.seconds > seconds:
            seconds, ext = floor.seconds, ext or floor.extrapolated
            note += "; decode-over-the-same-KV floor"
    return Lookup(seconds, ext, f"context attention {canonical_dtype(kv_dtype)}, {store.label(table)}{note}")


def generation(store: Store, batch: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
               kv_dtype: str = "bfloat16", window: int = 0) -> Lookup:
    """One new token per sequence over kv_len cached keys (window: only the last `window` read)."""
    table = "generation_attention"
    f = folded(store, table, heads, kv_heads, kv_dtype, window, head_dim)
    if f is not None:
        return generation(store, batch * f[2], kv_len, f[0], f[1], head_dim, kv_dtype, window)
    kv = canonical_dtype(kv_dtype)
    win = window if window in _ints(store, table, "window") else 0
    elem = KV_BYTES.get(kv if kv in store.choices(table, "kv_dtype") else "bfloat16", 2)

    def work(b: Any, s: Any, _h: int, kvh: int, d: int) -> Any:
        return b * (np.minimum(s, win) if win > 0 else s) * kvh * 2.0 * d * elem
    p = plan(store, table, "kv_len", work, kv_dtype, window, head_dim, heads, kv_heads)
    lr, ext = p.rate(math.log(kv_len), math.log(batch))
    keys = min(kv_len, window) if window > 0 else kv_len
    lw = math.log(batch * keys * kv_heads * 2.0 * head_dim * KV_BYTES.get(kv, 2))
    return Lookup(math.exp(lw - lr + LN_US), ext or p.substituted,
                  f"generation attention {kv}, {store.label(table)}{p.note}")


def mla(store: Store, phase: str, batch: int, length: int, heads: int, prefix: int = 0,
        kv_dtype: str = "bfloat16", gemm_dtype: str = "bfloat16") -> Lookup:
    """DeepSeek-V3's MLA attention module, one layer: phase 'context' (length = new tokens after
    `prefix`) or 'generation' (length = kv_len); heads per GPU (128 / TP)."""
    table = f"mla_{phase}"
    ctx = phase == "context"
    gd = store.pick(table, "gemm_dtype", gemm_dtype)

    def work(b: Any, s: Any, h: int, _kvh: int, _d: int) -> Any:
        return b * h * s * (s + 1) / 2 if ctx else b * s
    p = plan(store, table, "q_len" if ctx else "kv_len", work, kv_dtype, None, None, heads, 1,
             (("gemm_dtype", gd), ("mla_dtype", "bfloat16")))
    lr, ext = p.rate(math.log(length + prefix if ctx else length), math.log(batch))
    lw = math.log(batch * heads * pairs(length, prefix) if ctx else batch * length)
    return Lookup(math.exp(lw - lr + LN_US), ext or p.substituted,
                  f"MLA {phase} module {canonical_dtype(kv_dtype)}/{gd}, {store.label(table)}{p.note}")
