"""kvsim: a discrete-event simulator of LLM-serving KV-cache memory and a GPU capacity planner.

    from sim import load_trace, make_config, simulate
    result = simulate(make_config(model="llama-3.1-8b", gpu="h100"), load_trace("trace.csv"))

The names below are imported on first use, so ``import sim`` (and the CLI) stays light.
"""

from __future__ import annotations

import os
from typing import Any

if os.environ.get("KVSIM_PURE_PYTHON"):  # compiled modules imported from their .py (sim.compiled)
    from sim.compiled import prefer_source

    prefer_source()

__version__ = "0.1.0"
__all__ = ["SimConfig", "SimResult", "load_trace", "make_config", "simulate"]

_EXPORTS = {
    "simulate": "sim.run.simulate",
    "SimResult": "sim.run.simulate",
    "SimConfig": "sim.config.schema",
    "make_config": "sim.config.schema",
    "load_trace": "workloads.loader",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
