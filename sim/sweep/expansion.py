"""Grid -> points: the cartesian product over the base config, with meaningless keys collapsed.

``block_size`` means nothing for a slab allocator, ``reservation`` nothing for a paged one:
such keys are reset to their default before the point is keyed, so the grid
``allocator=paged,slab x block_size=8,16,32`` is four simulations, not six.
"""

from __future__ import annotations

from itertools import product
from pathlib import Path
from typing import Any

from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.frontend.stage import FrontEnd
from sim.run.clients import ClientSpec, refuse, sessions_of
from sim.sweep.grid import CLIENTS_KEY, TRACE_KEY
from sim.sweep.point import Point, point_key
from workloads import load_trace

#: Keys that mean nothing for an allocator (or another switch): collapsed to the field default.
IRRELEVANT: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("allocator", "slab", ("block_size", "enable_prefix_caching", "preemption", "swap_space")),
    ("allocator", "paged", ("reservation", "slab_placement")),
    ("preemption", "recompute", ("swap_space",)),
)


def _collapse(kw: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Reset options that mean nothing for this point to their defaults; return those names."""
    cfg = make_config("sweep grid", **kw)
    dead: set[str] = set()
    for switch, value, keys in IRRELEVANT:
        if getattr(cfg, switch) == value:
            dead.update(keys)
    if cfg.cost_model.partition(":")[0] != "calibrated":
        dead.add("calibration")
    return {k: v for k, v in kw.items() if k not in dead}, dead


def client_counts(grid: dict[str, list[Any]]) -> list[int | None]:
    """The swept ``max_concurrency`` values (None: open loop), each checked as ``--max-concurrency``."""
    counts = list(dict.fromkeys(grid.get(CLIENTS_KEY, [None])))
    for n in counts:
        try:
            ClientSpec(n)
        except ConfigError:
            raise ConfigError(f"sweep key {CLIENTS_KEY}={n!r}: must be a whole number >= 1 (null: open loop)") from None
    return counts


def expand(grid: dict[str, list[Any]], base: dict[str, Any] | None = None,
           trace: str | Path | None = None) -> list[Point]:
    """Cartesian product of ``grid`` over ``base``; invalid values raise ConfigError up front,
    and so do clients a point's run would refuse (:func:`sim.run.clients.refuse`).

    Points that differ only in collapsed keys (e.g. block_size under allocator=slab) become one
    point; their column for the collapsed key is None.
    """
    base = dict(base or {})
    traces = [str(t) for t in grid.get(TRACE_KEY, [])] or ([str(trace)] if trace else [])
    if not traces:
        raise ConfigError("sweep: no trace (give TRACE or --set trace=PATH,...)")
    info = {t: _trace_info(t) for t in dict.fromkeys(traces)}  # path -> (content hash, has sessions)
    keys = [k for k in grid if k not in (TRACE_KEY, CLIENTS_KEY)]
    counts = client_counts(grid)
    points: dict[str, Point] = {}
    for tr, n in product(traces, counts):
        h, sessions = info[tr]
        for combo in product(*(grid[k] for k in keys)):
            kw, dead = _collapse({**base, **dict(zip(keys, combo, strict=True))})
            cfg = make_config("sweep grid", **kw)
            refuse(n, sessions, FrontEnd.of(cfg))
            config = cfg.model_dump()
            key = point_key(config, h, n)
            if key not in points:
                cols = {k: None if k in dead else config[k] for k in keys}
                points[key] = Point(key, config, tr, h, {TRACE_KEY: tr, **cols}, n)
    return list(points.values())


def _trace_info(path: str) -> tuple[str, bool]:
    tr = load_trace(path)
    return tr.content_hash, sessions_of(tr) is not None
