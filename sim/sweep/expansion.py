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
from sim.sweep.grid import TRACE_KEY
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


def expand(grid: dict[str, list[Any]], base: dict[str, Any] | None = None,
           trace: str | Path | None = None) -> list[Point]:
    """Cartesian product of ``grid`` over ``base``; invalid values raise ConfigError up front.

    Points that differ only in collapsed keys (e.g. block_size under allocator=slab) become one
    point; their column for the collapsed key is None.
    """
    base = dict(base or {})
    traces = [str(t) for t in grid.get(TRACE_KEY, [])] or ([str(trace)] if trace else [])
    if not traces:
        raise ConfigError("sweep: no trace (give TRACE or --set trace=PATH,...)")
    hashes = {t: load_trace(t).content_hash for t in dict.fromkeys(traces)}
    keys = [k for k in grid if k != TRACE_KEY]
    points: dict[str, Point] = {}
    for tr in traces:
        for combo in product(*(grid[k] for k in keys)):
            kw, dead = _collapse({**base, **dict(zip(keys, combo, strict=True))})
            config = make_config("sweep grid", **kw).model_dump()
            key = point_key(config, hashes[tr])
            if key not in points:
                cols = {k: None if k in dead else config[k] for k in keys}
                points[key] = Point(key, config, tr, hashes[tr], {TRACE_KEY: tr, **cols})
    return list(points.values())
