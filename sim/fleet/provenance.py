"""What a plan bundle records about its inputs: the trace file's hash and the package versions."""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from pathlib import Path


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
