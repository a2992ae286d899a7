"""(3) Sweep heatmaps over two keys, with the best cell under an SLO marked."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from sim.errors import ConfigError
from sim.io import fmt
from sim.plots.common import RunInfo, joined

#: column -> (title, unit, scale for display); unit TIME picks ms/s/min/h per panel (sim.io.fmt)
TIME = "time"
METRICS: dict[str, tuple[str, str, float]] = {
    "throughput_rps": ("throughput", "req/s", 1.0),
    "ttft_p99_s": ("p99 TTFT", TIME, 1.0),
    "tpot_p99_s": ("p99 TPOT", TIME, 1.0),
    "preemptions_per_1k": ("preemptions per 1k requests", "", 1.0),
    "mem_token_state": ("mean token-state share of the KV pool", "%", 100.0),
}


def panel_scale(metric: str, values: np.ndarray) -> tuple[str, float]:
    """(title with unit, divisor) of one panel: latencies take the unit of their largest cell."""
    title, unit, scale = METRICS.get(metric, (metric, "", 1.0))
    if unit == TIME or (metric not in METRICS and metric.endswith("_s")):
        finite = values[np.isfinite(values)]
        unit, per = fmt.time_unit(float(np.abs(finite).max())) if len(finite) else ("s", 1.0)
        return f"{title} ({unit})", per
    return (f"{title} ({unit})" if unit else title), 1.0 / scale
_OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, "<": operator.lt,
                                                     ">=": operator.ge, ">": operator.gt}
Slo = tuple[str, str, float]


def parse_slo(items: Sequence[str]) -> list[Slo]:
    """``["ttft_p99_s<=0.5", "tpot_p99_s<0.05"]`` -> [(metric, op, value), ...] (SI units)."""
    out = []
    for s in items:
        m = re.fullmatch(r"\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*", s)
        if not m:
            raise ConfigError(f"--slo {s!r}: expected METRIC<=VALUE, e.g. ttft_p99_s<=0.5")
        out.append((m.group(1), m.group(2), float(m.group(3))))
    return out


def sweep_info(df: pd.DataFrame) -> RunInfo:
    def col(c: str) -> str:
        return joined([str(v) for v in df[c].dropna()]) if c in df and df[c].notna().any() else "?"
    traces = [Path(str(t)).name for t in df["trace"].dropna()] if "trace" in df else ["?"]
    return RunInfo(joined(traces), col("model"), col("gpu"), col("cost_model_name"))


def best_cell(df: pd.DataFrame, x: str, y: str, slo: Sequence[Slo]) -> tuple[object, object] | None:
    """(x, y) of the highest mean throughput among cells meeting every SLO (cell means)."""
    cols = ["throughput_rps", *(m for m, _, _ in slo)]
    for m in cols:
        if m not in df:
            raise ConfigError(f"--slo: no column {m!r} in the sweep (e.g. ttft_p99_s, tpot_p99_s)")
    cells = df.groupby([x, y], dropna=False)[cols].mean()
    ok = np.ones(len(cells), dtype=bool)
    for m, op, v in slo:
        ok &= np.array([_OPS[op](float(a), v) for a in cells[m]], dtype=bool)
    if not ok.any():
        return None
    idx = cells[ok]["throughput_rps"].idxmax()
    return idx[0], idx[1]


def overloaded_cells(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame | None:
    """1.0 where some point of the (x, y) cell overloaded its configuration (sim/io/overload.py)."""
    if "overloaded" not in df:
        return None
    flag = df["overloaded"].astype("boolean").fillna(False).astype(float)
    return df.assign(_over=flag).pivot_table(index=y, columns=x, values="_over", aggfunc="max", dropna=False)


def _mark_overloaded(ax: plt.Axes, piv: pd.DataFrame, over: pd.DataFrame | None) -> bool:
    """Hatch the overloaded cells of one panel; True if any."""
    if over is None:
        return False
    cells = over.reindex(index=piv.index, columns=piv.columns).to_numpy(dtype=float)
    hit = np.argwhere(cells > 0)
    for n, (i, j) in enumerate(hit):
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="orange", lw=1.2, hatch="//",
                               label="overloaded: served < offered rate" if n == 0 else None))
    return len(hit) > 0


def _tick(v: object) -> str:
    """A collapsed key (e.g. block_size under allocator=slab) is NA: show it as n/a."""
    return "n/a" if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else str(v)


#: the colour scale of a panel spans at least this share of its typical value: cells equal to 3
#: digits (every throughput 0.361) share one colour instead of purple against yellow
MIN_RELATIVE_SPAN = 0.10
MAX_FACETS = 6
SWEEP_KEYS = ("allocator", "block_size", "gpu_memory_utilization", "seed", "reservation", "max_num_seqs",
              "max_num_batched_tokens", "preemption", "model", "gpu", "tensor_parallel_size", "kv_cache_dtype",
              "preset", "trace")


def colour_range(values: np.ndarray) -> tuple[float, float]:
    """(vmin, vmax) of a panel: the data's range, widened to :data:`MIN_RELATIVE_SPAN` of its middle."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    mid = (lo + hi) / 2
    need = MIN_RELATIVE_SPAN * abs(mid) if mid != 0 else 1.0
    if hi - lo < need:
        lo, hi = mid - need / 2, mid + need / 2
    return lo, hi


def facets(ok: pd.DataFrame, x: str, y: str) -> tuple[list[tuple[str, pd.DataFrame]], list[str], str]:
    """One panel column per combination of the other varying sweep keys (up to :data:`MAX_FACETS`),
    never a silent average: ([(label, rows)], the keys faceted on, a title note)."""
    others = [c for c in SWEEP_KEYS if c in ok and c not in (x, y) and ok[c].nunique(dropna=False) > 1]
    if not others:
        return [("", ok)], [], ""
    groups = list(ok.groupby(others, dropna=False, sort=True))
    if len(groups) > MAX_FACETS:
        return [("", ok)], [], f" | AVERAGED over {', '.join(others)} ({len(groups)} combinations: too many to facet)"
    out = []
    for key, rows in groups:
        vals = key if isinstance(key, tuple) else (key,)
        out.append((", ".join(f"{k}={_tick(v)}" for k, v in zip(others, vals, strict=True)), rows))
    return out, others, f" | one column per {', '.join(others)}"


def _label_colour(v: float, lo: float, hi: float) -> str:
    """Black on viridis' light end, white on its dark end."""
    return "black" if hi > lo and (v - lo) / (hi - lo) > 0.6 else "white"


def sweep_heatmaps(df: pd.DataFrame, x: str, y: str, *, metrics: Sequence[str] = tuple(METRICS),
                   slo: Sequence[Slo] = ()) -> Figure:
    """One heatmap per metric over (x, y), one column of them per value of any other varying key
    (:func:`facets`); each metric's colour scale is shared by its panels and never narrower than
    :data:`MIN_RELATIVE_SPAN` of its values (:func:`colour_range`)."""
    for k in (x, y):
        if k not in df:
            raise ConfigError(f"heatmap key {k!r} is not a column of the sweep")
    ok = df[df["status"] == "ok"]
    groups, faceted, note = facets(ok, x, y)
    n = len(metrics)
    if faceted:
        nrows, ncols = n, len(groups)
    else:
        ncols = min(n, 3)
        nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.3 * nrows), squeeze=False)
    slots = [[axes[i][j] for j in range(ncols)] for i in range(nrows)] if faceted else \
        [[ax] for ax in axes.flat]
    for ax in axes.flat[n:] if not faceted else ():
        ax.set_visible(False)
    bests = []
    for col, (label, rows) in enumerate(groups):
        best = best_cell(rows, x, y, slo)
        bests.append(best)
        over = overloaded_cells(rows, x, y)
        for r, m in enumerate(metrics):
            ax = slots[r][col] if faceted else slots[r][0]
            pivs = [g.pivot_table(index=y, columns=x, values=m, aggfunc="mean", dropna=False) for _, g in groups]
            name, per = panel_scale(m, np.concatenate([p.to_numpy(dtype=float).ravel() for p in pivs]))
            lo, hi = colour_range(np.concatenate([p.to_numpy(dtype=float).ravel() for p in pivs]) / per)
            piv = pivs[col] / per
            _panel(fig, ax, piv, name + (f" | {label}" if label else ""), x, y, lo, hi)
            marked = _mark_overloaded(ax, piv, over)
            if best is not None:
                j, i = list(piv.columns).index(best[0]), list(piv.index).index(best[1])
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="red", lw=2.5,
                                       label="best throughput under SLO"))
            if best is not None or marked:
                ax.legend(loc="upper left", fontsize=7, bbox_to_anchor=(0, -0.18))
    slo_txt = ", ".join(f"{m} {op} {v:g}" for m, op, v in slo) or "none"
    best = bests[0] if len(bests) == 1 else None
    verdict = ("no cell meets the SLO" if all(b is None for b in bests) else
               f"best: {x}={best[0]}, {y}={best[1]}" if best is not None else "best per column: red box")
    over_all = overloaded_cells(ok, x, y)
    if over_all is not None and (over_all.to_numpy(dtype=float) > 0).any():
        note += f" | {int((over_all.to_numpy(dtype=float) > 0).sum())} overloaded cell(s) hatched"
    fig.suptitle(sweep_info(ok).title(f"Sweep over {x} x {y} | SLO: {slo_txt} ({verdict}){note}"), fontsize=10)
    fig.tight_layout()
    return fig


def _panel(fig: Figure, ax: plt.Axes, piv: pd.DataFrame, name: str, x: str, y: str, lo: float, hi: float) -> None:
    data = piv.to_numpy(dtype=float)
    im = ax.imshow(data, cmap="viridis", aspect="auto", origin="lower", vmin=lo, vmax=hi)
    ax.set_xticks(range(piv.shape[1]), [_tick(v) for v in piv.columns])
    ax.set_yticks(range(piv.shape[0]), [_tick(v) for v in piv.index])
    ax.set(xlabel=x, ylabel=y, title=name)
    size = max(6.0, min(9.0, 48.0 / max(piv.shape)))
    for (i, j), v in np.ndenumerate(data):
        if np.isfinite(v):
            ax.text(j, i, fmt.num(v, whole=False), ha="center", va="center", fontsize=size,
                    color=_label_colour(v, lo, hi))
    fig.colorbar(im, ax=ax, label=name.split(" | ")[0], format=FuncFormatter(lambda v, _pos: fmt.num(v)))
