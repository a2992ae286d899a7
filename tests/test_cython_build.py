"""The modules compiled by Cython from their own source (``setup.py``) are built from the source
as it is: an extension older than its ``.py`` or ``.pxd`` would run code that is no longer there
(an editable install does not rebuild on an edit: ``python setup.py build_ext --inplace``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.compiled import is_compiled
from tests.helpers import bench_module


@pytest.mark.parametrize("name", [n for n, _ in bench_module("record").cython_modules()])
def test_a_compiled_module_is_not_older_than_its_source(name: str) -> None:
    module = dict(bench_module("record").cython_modules())[name]
    if not is_compiled(module):
        pytest.skip(f"{module.__name__} is not compiled here (no build, or KVSIM_PURE_PYTHON set)")
    built = Path(module.__file__ or "")
    for src in (built.with_name(module.__name__.rpartition(".")[2] + ext) for ext in (".py", ".pxd")):
        if src.suffix == ".pxd" and not src.exists():
            continue  # (compiled as it is, untyped)
        assert built.stat().st_mtime >= src.stat().st_mtime, f"{built.name} is older than {src.name}: rebuild"
