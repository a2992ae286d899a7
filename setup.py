"""The compiled extensions (metadata and everything else: pyproject.toml). All optional: without a
C compiler (or Cython) ``pip install`` still succeeds and the modules run as Python.

The modules in ``CYTHON`` are compiled by Cython from their own ``.py`` source, typed by the
``.pxd`` beside it (issue 51: one implementation, no hand-written C); the same ``.py`` runs as
plain Python where nothing was built, or with ``KVSIM_PURE_PYTHON`` set (:mod:`sim.compiled`).
``KVSIM_NO_CYTHON`` (any non-empty value) at build time leaves them uncompiled.

No fused multiply-add where floats are summed or timed (``-ffp-contract=off``): every float is
the one Python computes.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup

NO_FMA = ["-ffp-contract=off"]
CYTHON = ["sim.cost.decode_time", "sim.io.step_fold", "sim.io.fill", "sim.engine.fastforward.run_layout",
          "sim.kv.free_queue", "sim.kv.block_pool", "sim.kv.block_table", "sim.kv.margin", "sim.kv.table_loops",
          "sim.sched.waiting_pass", "sim.engine.step_batch", "sim.engine.fastforward.decoders",
          "sim.engine.fastforward.steps", "sim.engine.fastforward.quiet_steps"]
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
