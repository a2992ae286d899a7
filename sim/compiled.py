"""The optional compiled code: one way to find it, one way to turn it off.

``pip install`` compiles where a C compiler is (``setup.py``; every extension optional):

- modules compiled by Cython from their own ``.py`` source (typed by the ``.pxd`` beside it):
  the extension is imported in place of the ``.py``, whose Python is the same code;
- hand-written C twins of Python loops (issue 51 replaces them): a module asks
  :func:`compiled` for its twin once, at import, and falls back to its Python on None.

``KVSIM_PURE_PYTHON`` (any non-empty value, read when :mod:`sim` is imported) turns both off:
:func:`compiled` gives None, and :func:`prefer_source` has each compiled ``sim`` module imported
from its ``.py`` instead (the state of an install without a C compiler).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType


def compiled(name: str) -> ModuleType | None:
    """The C twin ``name`` (``sim.kv._pool_loops``, say), or None: not built, or
    ``KVSIM_PURE_PYTHON`` set."""
    if os.environ.get("KVSIM_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was imported from a compiled extension (not from its ``.py``)."""
    return isinstance(getattr(module, "__loader__", None), ExtensionFileLoader)


class SourceFirst:
    """A meta-path finder: a ``sim`` module built as an extension from a ``.py`` beside it is
    imported from that ``.py``."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if not name.startswith("sim."):
            return None
        spec = PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, ExtensionFileLoader) or spec.origin is None:
            return None
        src = Path(spec.origin).with_name(name.rpartition(".")[2] + ".py")
        return importlib.util.spec_from_file_location(name, src) if src.is_file() else None


def prefer_source() -> None:
    """Import compiled ``sim`` modules from their ``.py`` from now on (``KVSIM_PURE_PYTHON``)."""
    if not any(isinstance(f, SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFirst())
