"""Architecture rules of the code base, checked by reading the source (``ast``), never importing it.

Rules (issue 9, "Core redesign"):

1. No import cycles among the modules of the packages ``sim``, ``workloads`` and
   ``calibration``.
2. No Python file under ``sim/`` is longer than 300 lines.

What counts as an import (rule 1):

- ``import a.b.c`` is an edge to the module ``a.b.c`` (the longest prefix that is a module of
  the three packages; the parent packages it also initialises are not counted).
- ``from a.b import x`` is an edge to the submodule ``a.b.x`` when there is one, else to
  ``a.b`` (a package's ``__init__.py`` is the module ``a.b``). Relative imports are resolved
  against the importing module's package.
- Imports under ``if TYPE_CHECKING:`` count: they are still a loop between two modules' ideas
  of each other (issue 9 lists ``sim/engine/replica.py <-> sim/engine/fastforward/window.py``, whose back edge was
  such an import), and they break as soon as someone needs the name at run time.
- Imports inside a function or method body count too (``COUNT_FUNCTION_LOCAL_IMPORTS``). A
  lazy import does not fail at import time, but it is still a loop between two modules: issue
  9 lists ``sim/cost.py <-> sim/cost_calibrated.py``, whose back edge was an import inside a
  function of ``sim/cost.py``. Deliberate lazy imports that are not loops (the CLI imports
  only the command it runs; heavy optional dependencies load on use) are one-way edges and
  never trip this rule. With the switch off, only statements run at import time count
  (module level, class bodies, module-level ``if``/``try``/``with`` blocks).
- Imports of anything outside the three packages (stdlib, third party, ``tests``) are ignored.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "workloads", "calibration")
MAX_LINES = 300
COUNT_FUNCTION_LOCAL_IMPORTS = True  # see the module docstring

Graph = dict[str, dict[str, int]]  # module -> {imported module: line of the first such import}


# --------------------------------------------------------------------------- the module graph


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    mods: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _statements(body: list[ast.stmt], function_bodies: bool) -> Iterator[ast.stmt]:
    """Every statement of ``body``, nested ones included; with ``function_bodies=False``, only
    those run at import time (recurse into if/try/with/match/class, not into defs)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not function_bodies:
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                for child in children:
                    if isinstance(child, ast.ExceptHandler | ast.match_case):
                        yield from _statements(child.body, function_bodies)
                    elif isinstance(child, ast.stmt):
                        yield from _statements([child], function_bodies)


def _longest_module_prefix(name: str, mods: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in mods:
            return candidate
    return None


def imports_of(module: str, path: Path, mods: dict[str, Path],
               function_bodies: bool = COUNT_FUNCTION_LOCAL_IMPORTS) -> dict[str, int]:
    """The modules of ``mods`` that ``module`` imports, with the line of the first import."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target is not None and target != module:
            found.setdefault(target, line)

    for node in _statements(tree.body, function_bodies):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_longest_module_prefix(alias.name, mods), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in mods else _longest_module_prefix(base, mods), node.lineno)
    return found


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES,
                 function_bodies: bool = COUNT_FUNCTION_LOCAL_IMPORTS) -> tuple[Graph, dict[str, Path]]:
    """The import graph of ``packages`` under ``root``, and the file of every module."""
    mods = module_files(root, packages)
    return {m: imports_of(m, p, mods, function_bodies) for m, p in mods.items()}, mods


def import_cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    scc.append(m)
                    if m == node:
                        break
                if len(scc) > 1:
                    sccs.append(sorted(scc))
    return sorted(sccs)


def describe_cycle(scc: list[str], graph: Graph, mods: dict[str, Path], root: Path) -> str:
    members = set(scc)
    edges = [f"    {m} -> {t}  ({mods[m].relative_to(root)}:{line})"
             for m in scc for t, line in sorted(graph[m].items()) if t in members]
    return f"  cycle of {len(scc)}: {', '.join(scc)}\n" + "\n".join(edges)


# --------------------------------------------------------------------------- the rules


def test_no_import_cycles_among_sim_workloads_calibration() -> None:
    """No module of sim, workloads or calibration imports itself back, directly or through
    others (TYPE_CHECKING and function-local imports included, see the module docstring).

    On failure the message lists every cycle (strongly connected component) with the edges
    inside it and where each is written.
    """
    graph, mods = import_graph(REPO)
    cycles = import_cycles(graph)
    assert not cycles, (f"{len(cycles)} import cycle(s):\n"
                        + "\n".join(describe_cycle(c, graph, mods, REPO) for c in cycles))


def test_no_python_file_under_sim_is_over_300_lines() -> None:
    """Every ``.py`` file under ``sim/`` is at most 300 lines long: one concept per file."""
    too_long = sorted(
        (len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(REPO)))
        for p in (REPO / "sim").rglob("*.py")
    )
    offenders = [(n, f) for n, f in too_long if n > MAX_LINES]
    assert not offenders, (f"{len(offenders)} file(s) under sim/ over {MAX_LINES} lines:\n"
                           + "\n".join(f"  {n:5d}  {f}" for n, f in reversed(offenders)))


# --------------------------------------------------------------------------- the checker itself


def _toy_package(root: Path) -> None:
    """pkg.a -> pkg.b -> (TYPE_CHECKING) pkg.sub.c -> (relative) pkg.a, and a lazy import."""
    files = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.c import C\n",
        "sub/__init__.py": "",
        "sub/c.py": "import os\nfrom ..a import thing\n",
        "lazy.py": "import pkg.late\n",
        "late.py": "def f():\n    from pkg import lazy\n",
    }
    (root / "pkg" / "sub").mkdir(parents=True)
    for name, text in files.items():
        (root / "pkg" / name).write_text(text)


def test_cycle_checker_sees_relative_submodule_and_type_checking_imports(tmp_path: Path) -> None:
    """The scanner resolves relative imports and ``from pkg import submodule``, counts
    TYPE_CHECKING imports and ignores the stdlib, so the rule cannot pass vacuously."""
    _toy_package(tmp_path)
    graph, _ = import_graph(tmp_path, ("pkg",), function_bodies=False)
    assert graph["pkg.a"] == {"pkg.b": 1}
    assert graph["pkg.b"] == {"pkg.sub.c": 3}
    assert graph["pkg.sub.c"] == {"pkg.a": 2}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_cycle_checker_counts_function_local_imports_only_when_asked(tmp_path: Path) -> None:
    """A lazy import inside a function closes a loop when function bodies are counted (the
    default here, ``COUNT_FUNCTION_LOCAL_IMPORTS``) and is invisible when they are not."""
    _toy_package(tmp_path)
    lazy_only, _ = import_graph(tmp_path, ("pkg",), function_bodies=False)
    everything, _ = import_graph(tmp_path, ("pkg",), function_bodies=True)
    assert lazy_only["pkg.late"] == {}
    assert everything["pkg.late"] == {"pkg.lazy": 2}
    assert ["pkg.late", "pkg.lazy"] not in import_cycles(lazy_only)
    assert ["pkg.late", "pkg.lazy"] in import_cycles(everything)
