"""The compiled extensions (metadata and everything else: pyproject.toml). All optional: without a
C compiler (or Cython) ``pip install`` still succeeds and the modules run as Python.

The modules in ``CYTHON`` (pyproject.toml's ``[tool.kvsim] compiled``) are compiled by Cython from
their own ``.py`` source, typed by the ``.pxd`` beside it where there is one (issue 51: one
implementation, no hand-written C); the same ``.py`` runs as
plain Python where nothing was built, or with ``KVSIM_PURE_PYTHON`` set (:mod:`sim.compiled`).
``KVSIM_NO_CYTHON`` (any non-empty value) at build time leaves them uncompiled.

No fused multiply-add where floats are summed or timed (``-ffp-contract=off``): every float is
the one Python computes.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from setuptools import Extension, setup

NO_FMA = ["-ffp-contract=off"]
CYTHON: list[str] = tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text())["tool"]["kvsim"]["compiled"]
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True, "embedsignature": True}


def cythonized() -> list[Extension]:
    if os.environ.get("KVSIM_NO_CYTHON"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:  # (a build without pyproject's build requirements): the .py runs as is
        print("setup.py: Cython not found; its modules stay Python")
        return []
    exts = [Extension(m, [m.replace(".", "/") + ".py"], extra_compile_args=NO_FMA) for m in CYTHON]
    out = cythonize(exts, compiler_directives=DIRECTIVES, build_dir="build/cython", quiet=True)
    for e in out:
        e.optional = True  # (cythonize does not carry it over)
    return out


setup(ext_modules=cythonized())
