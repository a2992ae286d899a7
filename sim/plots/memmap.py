"""(5) The memory map: physical blocks (paged) or slots (slab) vs time, coloured by request.

Recorded by replaying a (small) trace step by step with an ``on_step`` hook that snapshots
every live request's block table (paged) or chunk (slab)::

    paged, B = 4:  block 7 [r0 r0 r0 r0]  block 3 [r0 r0 . .]  <- partial tail
    slab:          slots [r0 prompt+generated | reservation | internal | buddy rounding]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import simpy
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from sim.config.schema import SimConfig
from sim.engine.replica import Replica
from sim.errors import ConfigError
from sim.io.ingest import make_requests
from sim.kv.layout import PagedLayout, SlabLayout
from sim.plots.common import RunInfo, config_label
from sim.run.build import build, new_replica
from workloads import Trace

FREE, TOKENS, TAIL, RESERVED, INTERNAL, EXTERNAL, SHARED, CACHED = range(8)
STATE_STYLE = {  # state -> (legend label, colour or None = the request's colour)
    TOKENS: ("token states (request colour)", None),
    TAIL: ("allocated, not yet filled (paged tail)", None),
    RESERVED: ("reservation (slab, future tokens)", None),
    INTERNAL: ("internal fragmentation (never used)", "#e03131"),
    EXTERNAL: ("buddy rounding / null block", "#9775fa"),
    SHARED: ("shared block (ref > 1)", "#000000"),
    CACHED: ("free, prefix-cached (reusable)", "#e9ecef"),
    FREE: ("free", "#ffffff"),
}
PALETTE = [to_rgb(c) for i, c in enumerate(plt.get_cmap("tab20").colors)  # type: ignore[attr-defined]
           if i not in (14, 15)]  # no greys: they would read as free/cached memory
_SHADE = {TOKENS: 1.0, TAIL: 0.45, RESERVED: 0.3}


def _shade(rgb: np.ndarray, st: int) -> np.ndarray:
    return 1 - (1 - rgb) * _SHADE[st]


@dataclass
class Layout:
    """Per-step snapshots of the KV pool: ``owner``/``state`` are (steps, units) arrays."""

    kind: str                 # "paged" (unit = block) | "slab" (unit = token slot)
    unit_tokens: int          # tokens per unit (block_size, or 1)
    info: RunInfo
    times: list[float] = field(default_factory=list)
    owner: list[np.ndarray] = field(default_factory=list)
    state: list[np.ndarray] = field(default_factory=list)
    tables: list[dict[int, list[tuple[int, int, int]]]] = field(default_factory=list)  # uid -> [(phys, fill, state)]


def _snap_paged(view: PagedLayout, running: Sequence, lay: Layout) -> None:
    B, N = view.unit_tokens, view.num_units
    owner = np.full(N, -1, np.int32)
    state = np.full(N, FREE, np.int8)
    for b in range(N):
        if view.ref(b) == 0 and view.cached(b):
            state[b] = CACHED
    if view.null_block == 0:
        state[0] = EXTERNAL
    tables = {}
    for r in running:
        row = []
        for j, b in enumerate(view.table(r)):
            fill = min(max(r.num_computed_tokens - j * B, 0), B)
            st = SHARED if view.ref(b) > 1 else TOKENS if fill == B else TAIL
            if owner[b] < 0:
                owner[b] = r.uid
            state[b] = st
            row.append((b, fill, st))
        tables[r.uid] = row
    lay.owner.append(owner)
    lay.state.append(state)
    lay.tables.append(tables)


def _snap_slab(view: SlabLayout, running: Sequence, lay: Layout) -> None:
    pool = view.num_units
    owner = np.full(pool, -1, np.int32)
    state = np.full(pool, FREE, np.int8)
    tables = {}
    for r in running:
        chunk = view.chunk(r)
        if chunk is None:
            continue
        s, requested, size = chunk
        marks = [s, s + r.num_computed_tokens, s + r.final_tokens, s + requested, s + size]
        owner[s:marks[-1]] = r.uid
        for (a, b), st in zip(pairwise(marks), (TOKENS, RESERVED, INTERNAL, EXTERNAL), strict=True):
            state[a:b] = st
        tables[r.uid] = [(m, 0, 0) for m in marks]
    lay.owner.append(owner)
    lay.state.append(state)
    lay.tables.append(tables)


def record_layout(cfg: SimConfig, trace: Trace) -> Layout:
    """Replay ``trace`` (keep it small: one snapshot per step) and snapshot the pool each step."""
    parts = build(cfg)
    kv, cost = parts.kv, parts.cost
    view = kv.layout
    if view is None:
        raise ConfigError(f"plot memmap: {cfg.model} has sliding-window or chunked-local layers (several "
                          "KV-cache groups); the memory map draws one group only -- use a full-attention model "
                          "or --disable-hybrid-kv-cache-manager")
    info = RunInfo(Path(trace.path).name, cfg.model, cfg.gpu, cost.name, config_label(cfg.model_dump()))
    lay = Layout(view.kind, view.unit_tokens, info)
    env = simpy.Environment()

    def on_step(rep: Replica) -> None:
        lay.times.append(float(rep.env.now))
        if view.kind == "paged":
            _snap_paged(view, rep.sched.running, lay)
        else:
            _snap_slab(view, rep.sched.running, lay)

    rep = new_replica(env, cfg, parts=parts, exact_steps=True, on_step=on_step)
    rep.submit_all(make_requests(trace, cfg))
    env.run()
    return lay


def _image(lay: Layout, columns: int) -> tuple[np.ndarray, float, float]:
    t = np.asarray(lay.times)
    grid = np.linspace(t[0], t[-1], min(columns, len(t)))
    idx = np.clip(np.searchsorted(t, grid, side="right") - 1, 0, len(t) - 1)
    owner = np.stack([lay.owner[i] for i in idx], axis=1)   # (units, columns)
    state = np.stack([lay.state[i] for i in idx], axis=1)
    img = np.ones((*owner.shape, 3))
    base = np.array(PALETTE)[np.where(owner >= 0, owner, 0) % len(PALETTE)]
    for st, (_, colour) in STATE_STYLE.items():
        m = state == st
        if colour is not None:
            img[m] = to_rgb(colour)
        else:  # the request's colour, lighter for unfilled/reserved slots
            img[m] = _shade(base[m], st)
    return img, float(t[0]), float(t[-1])


def memory_map(layouts: Sequence[Layout], *, columns: int = 700) -> Figure:
    """Side-by-side maps (e.g. paged and slab on the same trace)."""
    fig, axes = plt.subplots(1, len(layouts), figsize=(7 * len(layouts), 6), squeeze=False)
    for ax, lay in zip(axes[0], layouts, strict=True):
        img, t0, t1 = _image(lay, columns)
        ax.imshow(img, aspect="auto", origin="lower", interpolation="nearest",
                  extent=(t0, t1, -0.5, img.shape[0] - 0.5))
        unit = f"physical block (x {lay.unit_tokens} token slots)" if lay.kind == "paged" else "token slot (physical address)"
        ax.set(xlabel="simulated time (s)", ylabel=unit)
        ax.set_title(lay.info.title(f"KV memory map: {lay.info.label}"), fontsize=9)
    used = {int(s) for lay in layouts for st in lay.state for s in np.unique(st)}
    sample = np.array(PALETTE[0])
    handles = [Patch(fc=c or tuple(_shade(sample, s)), ec="black", lw=0.4, label=lab)
               for s, (lab, c) in STATE_STYLE.items() if s in used]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, title="colour = request; shade = state")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def block_table_view(lay: Layout, t: float, uids: Sequence[int] = (), *, max_requests: int = 4) -> Figure:
    """Block tables (logical -> physical, fill) or slab chunks of requests live at time ``t``."""
    i = int(np.clip(np.searchsorted(lay.times, t, side="right") - 1, 0, len(lay.times) - 1))
    tables = lay.tables[i]
    chosen = [u for u in uids if u in tables] or sorted(tables, key=lambda u: -len(tables[u]))[:max_requests]
    fig, ax = plt.subplots(figsize=(11, 1.2 + 1.0 * max(len(chosen), 1)))
    if lay.kind == "paged":
        _draw_tables(ax, tables, chosen, lay.unit_tokens)
        ax.set_xlabel("logical block index (box: physical block id; bar: filled slots)")
    else:
        _draw_chunks(ax, tables, chosen)
        ax.set_xlabel("token slot (physical address)")
    ax.set_yticks(range(len(chosen)), [f"request {u}" for u in chosen])
    ax.set_ylim(-0.7, len(chosen) - 0.3)
    ax.invert_yaxis()
    ax.set_title(lay.info.title(f"Block tables at t = {lay.times[i]:.2f} s (step {i}): {lay.info.label}"),
                 fontsize=9)
    fig.tight_layout()
    return fig


def _draw_tables(ax, tables, chosen, B) -> None:  # type: ignore[no-untyped-def]
    width = max((len(tables[u]) for u in chosen), default=1)
    for row, u in enumerate(chosen):
        colour = PALETTE[u % len(PALETTE)]
        for j, (phys, fill, st) in enumerate(tables[u]):
            ax.add_patch(Rectangle((j - 0.45, row - 0.35), 0.9, 0.7, fc="white",
                                   ec="black" if st == SHARED else "grey", lw=2 if st == SHARED else 0.8))
            ax.add_patch(Rectangle((j - 0.45, row - 0.35), 0.9 * fill / B, 0.7, fc=colour, alpha=0.8))
            ax.text(j, row, f"{phys}\n{fill}/{B}", ha="center", va="center", fontsize=7)
    ax.set_xlim(-0.6, width - 0.4)
    ax.legend(handles=[Patch(fc=PALETTE[0], label="filled slots (bar width = fill / block_size)"),
                       Patch(fc="white", ec="black", lw=2, label="shared block (ref > 1)")],
              loc="lower right", fontsize=7)


def _draw_chunks(ax, tables, chosen) -> None:  # type: ignore[no-untyped-def]
    colours = {TOKENS: None, RESERVED: None, INTERNAL: STATE_STYLE[INTERNAL][1], EXTERNAL: STATE_STYLE[EXTERNAL][1]}
    for row, u in enumerate(chosen):
        marks = [m for m, _, _ in tables[u]]
        base = PALETTE[u % len(PALETTE)]
        for (a, b), st in zip(pairwise(marks), colours, strict=True):
            c = colours[st] or (base if st == TOKENS else tuple(1 - (1 - x) * 0.3 for x in base))
            ax.barh(row, b - a, left=a, color=c, edgecolor="grey", height=0.6)
        ax.text(marks[0], row - 0.4, f"chunk [{marks[0]}, {marks[-1]})", fontsize=7)
    ax.legend(handles=[Patch(fc=PALETTE[0], label="token states"),
                       Patch(fc=tuple(1 - (1 - x) * 0.3 for x in PALETTE[0]), label="reservation"),
                       Patch(fc=STATE_STYLE[INTERNAL][1], label="internal fragmentation"),
                       Patch(fc=STATE_STYLE[EXTERNAL][1], label="buddy rounding")], loc="lower right", fontsize=7)
