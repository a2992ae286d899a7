"""$/GPU-hour: the catalog's price ranges, overridable by a user YAML (``--prices``).

The YAML maps catalog GPU names to either a number or a mapping::

    h100: 2.10                       # $/GPU-hour, all of low/typical/high
    a100-80gb: {typical: 1.45, low: 1.2, high: 1.9, source: "our 2026 contract"}

A user price is marked verified (the user vouches for it) with source ``user: FILE``. Catalog
prices keep their ``unverified`` flag (numbers recalled rather than sourced), and every output
that uses one says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from sim.errors import ConfigError
from sim.model.catalog import gpu_catalog
from sim.safe_yaml import safe_load

PricePoint = Literal["low", "typical", "high"]


@dataclass(frozen=True, slots=True)
class GpuPrice:
    gpu: str
    low: float
    typical: float
    high: float
    source: str
    unverified: bool

    def at(self, point: PricePoint = "typical") -> float:
        return float(getattr(self, point))


def catalog_prices() -> dict[str, GpuPrice]:
    return {k: GpuPrice(k, g.price.low, g.price.typical, g.price.high,
                        f"{g.price.source} ({g.price.month})" if g.price.month else g.price.source,
                        g.price.unverified)
            for k, g in gpu_catalog().items()}


def _number(path: Path, gpu: str, key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{path}: '{gpu}.{key}' = {v!r}: expected a price > 0 ($/GPU-hour)")
    return float(v)


def _override(path: Path, base: GpuPrice, v: Any) -> GpuPrice:
    src = f"user: {path.name}"
    if isinstance(v, dict):
        unknown = set(v) - {"low", "typical", "high", "source"}
        if unknown:
            raise ConfigError(f"{path}: '{base.gpu}.{sorted(unknown)[0]}': unknown key (low, typical, high, source)")
        if "typical" not in v:
            raise ConfigError(f"{path}: '{base.gpu}' needs a 'typical' price")
        typ = _number(path, base.gpu, "typical", v["typical"])
        low = _number(path, base.gpu, "low", v.get("low", typ))
        high = _number(path, base.gpu, "high", v.get("high", typ))
        if not low <= typ <= high:
            raise ConfigError(f"{path}: '{base.gpu}': expected low <= typical <= high, got {low}, {typ}, {high}")
        return replace(base, low=low, typical=typ, high=high,
                       source=f"{src}, {v['source']}" if v.get("source") else src, unverified=False)
    p = _number(path, base.gpu, "price", v)
    return replace(base, low=p, typical=p, high=p, source=src, unverified=False)


def load_prices(path: Path | None = None) -> dict[str, GpuPrice]:
    """Catalog prices, with the entries of ``path`` (if given) replacing them."""
    prices = catalog_prices()
    if path is None:
        return prices
    try:
        data = safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"--prices {path}: cannot read YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return prices
    if not isinstance(data, dict):
        raise ConfigError(f"--prices {path}: expected a mapping of GPU name -> $/GPU-hour")
    for k, v in data.items():
        key = str(k).lower()
        if key not in prices:
            raise ConfigError(f"--prices {path}: unknown GPU '{k}' (catalog: {', '.join(prices)})")
        prices[key] = _override(path, prices[key], v)
    return prices
