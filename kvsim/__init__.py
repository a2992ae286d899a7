"""``import kvsim``: the package is named after the CLI; the code lives in ``sim``.

    import kvsim
    res = kvsim.simulate(kvsim.make_config(model="llama-3.1-8b"), kvsim.load_trace("trace.csv"))

Every name of :mod:`sim`'s public API (``simulate``, ``make_config``, ``SimConfig``, ``SimResult``,
``load_trace``) is re-exported, imported on first use as ``sim`` does.
"""

from __future__ import annotations

from typing import Any

import sim
from sim import __all__, __version__

__all__ = [*__all__, "__version__"]


def __getattr__(name: str) -> Any:
    return getattr(sim, name)
