"""``import kvsim``: the package is named after the CLI; the code lives in ``sim``.

    import kvsim
    res = kvsim.simulate(kvsim.make_config(model="llama-3.1-8b"), kvsim.load_trace("trace.csv"))

Every name of :mod:`sim`'s public API (``simulate``, ``make_config``, ``SimConfig``, ``SimResult``,
``load_trace``) is re-exported, imported on first use as ``sim`` does; so are ``sweep``, ``plan``
and ``simulate_cluster`` (:mod:`kvsim.api`) and ``fleet_prefix_bounds`` (the fleet's prefix-hit
floor, per-replica LRU, shared LRU and unbounded reuse, :mod:`sim.cluster.whatif`).
"""

from __future__ import annotations

from typing import Any

import sim
from sim import __all__, __version__

_API = {"sweep": "kvsim.api", "plan": "kvsim.api", "simulate_cluster": "kvsim.api",
        "fleet_prefix_bounds": "sim.cluster.whatif"}
__all__ = [*__all__, *_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    return getattr(sim, name)
