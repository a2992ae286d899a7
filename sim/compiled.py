"""The optional compiled code: one way to find it, one way to turn it off.

``pip install`` compiles where a C compiler is (``setup.py``; every extension optional) the
modules Cython builds from their own ``.py`` source (typed by the ``.pxd`` beside it): the
extension is imported in place of the ``.py``, whose Python is the same code. There is no
hand-written C.

``KVSIM_PURE_PYTHON`` (any non-empty value, read when :mod:`sim` is imported) has each compiled
``sim`` module imported from its ``.py`` instead (:func:`prefer_source`): the state of an install
without a C compiler.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType


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
