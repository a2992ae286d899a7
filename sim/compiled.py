"""The optional compiled loops: one way to find them.

``pip install`` builds a few C extensions where a C compiler is found (``pyproject.toml``,
``ext-modules``, all ``optional``). Each replaces one hot loop whose Python implementation stays
the reference; a module asks :func:`compiled` for its extension once, at import, and falls back
to its Python when it gets None. ``KVSIM_PURE_PYTHON`` (any non-empty value) turns them all off.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def compiled(name: str) -> ModuleType | None:
    """The extension module ``name`` (``sim.kv._pool_loops``, say), or None: not built, or
    ``KVSIM_PURE_PYTHON`` set."""
    if os.environ.get("KVSIM_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
