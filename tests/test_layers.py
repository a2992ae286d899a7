"""Layer rules between the packages of ``sim`` (issue 15), read from the source with ``ast``.

The module graph comes from :mod:`tests.test_architecture` (same notion of an import:
TYPE_CHECKING and function-local imports count). A *package* is ``sim.<first part>``
(``sim.kv``, ``sim.engine``...); the root modules ``sim.request`` and ``sim.errors`` are
packages of their own; ``workloads`` and ``calibration`` are one package each.

1. No package loops: the package graph is acyclic (a module loop is already refused; this
   refuses ``sim.io -> sim.run -> sim.io`` made of two one-way module edges).
2. The engine and the scheduler never import a concrete allocator: of ``sim.kv`` they may
   import the contract (``sim.kv.base``, the ``KvConnector`` seam in ``sim.kv.connector``)
   and nothing else. Fork / copy-on-write and the
   offload tier reach them as capabilities of the contract.
3. Outputs never import the builder: ``sim.io`` (records, results, summary) is handed the
   run's parts; it never rebuilds them from the config (``sim.run``).
4. The runtime never imports ``calibration/``: only the CLI (``kvsim calibrate``) may; the
   cost model reads committed data files, never the fitting code.

Each rule is also run on a planted violation, so it cannot pass vacuously.
"""

from __future__ import annotations

from collections import defaultdict

from tests.test_architecture import REPO, Graph, import_cycles, import_graph

ENGINE_SIDE = ("sim.engine", "sim.sched")
KV_CONTRACT = ("sim.kv", "sim.kv.base", "sim.kv.linear", "sim.kv.connector", "sim.kv.margin")  # the contract
# (with its linear breakdown and capacity-margin record) and the connector seam
OUTPUTS = ("sim.io",)
CALIBRATION_USERS = ("sim.cli",)


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "sim" and len(parts) > 1 else parts[0]


def package_graph(graph: Graph) -> Graph:
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for mod, deps in graph.items():
        for dep, line in deps.items():
            a, b = package_of(mod), package_of(dep)
            if a != b and b != "sim":  # ``sim`` itself: the lazy public API, imported by nothing
                out[a].setdefault(b, line)
        out.setdefault(package_of(mod), {})
    return dict(out)


def violations(graph: Graph) -> list[str]:
    """Every broken rule 2-4 edge, as ``module -> module (line)``."""
    bad = []
    for mod, deps in sorted(graph.items()):
        pkg = package_of(mod)
        for dep, line in sorted(deps.items()):
            if pkg in ENGINE_SIDE and dep.startswith("sim.kv") and dep not in KV_CONTRACT:
                bad.append(f"engine/scheduler imports a concrete allocator: {mod} -> {dep} (line {line})")
            if pkg in OUTPUTS and dep.startswith("sim.run"):
                bad.append(f"an output imports the builder: {mod} -> {dep} (line {line})")
            if (mod.startswith("sim") and pkg not in CALIBRATION_USERS
                    and package_of(dep) == "calibration"):
                bad.append(f"the runtime imports calibration/: {mod} -> {dep} (line {line})")
    return bad


def test_no_package_loops() -> None:
    graph, _ = import_graph(REPO)
    loops = import_cycles(package_graph(graph))
    assert not loops, f"package loop(s): {loops}"


def test_engine_scheduler_outputs_and_runtime_keep_their_layers() -> None:
    graph, _ = import_graph(REPO)
    bad = violations(graph)
    assert not bad, "\n".join(bad)


def test_the_rules_catch_planted_violations() -> None:
    """One planted edge per rule on top of the real graph: each is reported, and a planted
    two-package loop is found."""
    graph, _ = import_graph(REPO)
    planted = {k: dict(v) for k, v in graph.items()}
    planted["sim.engine.step"]["sim.kv.paged"] = 1
    planted["sim.sched.scheduler"]["sim.kv.slab"] = 2
    planted["sim.io.summary"]["sim.run.build"] = 3
    planted["sim.cost.sources"]["calibration.fit"] = 4
    bad = violations(planted)
    assert any("sim.engine.step -> sim.kv.paged" in b for b in bad)
    assert any("sim.sched.scheduler -> sim.kv.slab" in b for b in bad)
    assert any("sim.io.summary -> sim.run.build" in b for b in bad)
    assert any("sim.cost.sources -> calibration.fit" in b for b in bad)
    looped = {k: dict(v) for k, v in graph.items()}
    looped["sim.model.catalog"]["sim.cost.batch"] = 5  # sim.cost -> sim.model exists: a loop
    assert any({"sim.cost", "sim.model"} <= set(c) for c in import_cycles(package_graph(looped)))
