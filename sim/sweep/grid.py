"""The sweep grid as the user writes it: ``--set KEY=v1,v2`` flags or a ``--grid`` YAML file.

Both give ``{key: [values]}`` with keys checked against the simulate options (``trace`` too),
so a typo fails before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from sim.config.schema import SimConfig, read_yaml
from sim.errors import ConfigError
from sim.safe_yaml import safe_load

TRACE_KEY = "trace"
#: how the trace is sent (``--max-concurrency``, :mod:`sim.run.clients`): swept like a config key,
#: though no SimConfig field (it is the load, not the server), as InferenceX sweeps 4..128 clients
CLIENTS_KEY = "max_concurrency"


def _norm_key(k: str) -> str:
    k = str(k).strip().replace("-", "_")
    if k not in (TRACE_KEY, CLIENTS_KEY) and k not in SimConfig.model_fields:
        raise ConfigError(f"sweep key {k!r}: not a simulate option (valid: {TRACE_KEY}, {CLIENTS_KEY}, "
                          f"{', '.join(SimConfig.model_fields)})")
    return k


def _scalar(text: str) -> Any:
    """``16`` -> 16, ``0.9`` -> 0.9, ``true`` -> True, ``null`` -> None, else the string."""
    try:
        v = safe_load(text)
    except yaml.YAMLError:
        return text
    return v if isinstance(v, (int, float, bool, str)) or v is None else text


def parse_sets(sets: Iterable[str]) -> dict[str, list[Any]]:
    """``["block_size=8,16", "allocator=paged"]`` -> ``{"block_size": [8, 16], ...}``."""
    grid: dict[str, list[Any]] = {}
    for s in sets:
        key, eq, vals = s.partition("=")
        if not eq or not vals.strip():
            raise ConfigError(f"--set {s!r}: expected KEY=v1,v2,...")
        k = _norm_key(key)
        grid.setdefault(k, []).extend(
            v.strip() if k == TRACE_KEY else _scalar(v.strip()) for v in vals.split(","))
    return grid


def load_grid_yaml(path: Path) -> dict[str, list[Any]]:
    """A YAML mapping of key -> value or list of values (scalars are fixed for every point)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sweep keys to value lists")
    return {_norm_key(k): list(v) if isinstance(v, list) else [v] for k, v in data.items()}
