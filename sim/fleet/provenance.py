"""What a plan bundle records about its inputs: the trace file's hash and the package versions."""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from pathlib import Path
from typing import Any


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions(backend: str) -> dict[str, str]:
    out = {"python": platform.python_version()}
    pkgs = ["kvsim", "numpy", "pandas", "simpy", "scipy", "matplotlib"] + (["ray"] if backend == "ray" else [])
    for p in pkgs:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def cost_model_names(base: dict[str, Any], gpus: list[str], tps: list[int]) -> str | dict[str, str]:
    """The cost model of each GPU x TP a plan sizes (one name when there is one pair): a TP 4
    plan's step times come from a TP 4 model, and inputs.yaml says so."""
    from sim.config.schema import make_config
    from sim.cost.for_config import cost_model_for

    names = {f"{g} TP{t}": cost_model_for(make_config("plan", **dict(base, gpu=g, tensor_parallel_size=t))).name
             for g in gpus for t in tps}
    return next(iter(names.values())) if len(names) == 1 else names
