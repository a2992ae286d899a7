"""Calibration files and which one each term of the calibrated model takes its numbers from.

Order, per term: this GPU measured by our harness, this GPU from Vidur's published profiles,
else the nearest GPU (by bandwidth) scaled by datasheet bandwidth / compute ratios, labelled
``extrapolated``. A term no file covers falls back to the datasheet roofline for that term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sim.cost.features import scale_coefficients
from sim.errors import ConfigError
from sim.model.catalog import GpuSpec, gpu_catalog
from sim.safe_yaml import safe_load

SCHEMA = "kvsim-calibration/1"
DATA_DIR = Path(__file__).resolve().parents[2] / "calibration" / "data"


@dataclass(frozen=True, slots=True)
class Source:
    doc: dict[str, Any]
    path: Path

    @property
    def gpu(self) -> str:
        return str(self.doc.get("gpu", "?"))

    @property
    def label(self) -> str:
        return str(self.doc.get("label", self.doc.get("source", self.path.name)))

    @property
    def measured(self) -> bool:
        return self.doc.get("source") == "measured"


@dataclass(frozen=True, slots=True)
class Term:
    coef: dict[str, float]
    label: str
    own: bool  # measured on this very GPU (not scaled from another one)


def read_calibration(path: Path) -> Source:
    """One calibration YAML (``yaml.safe_load`` only)."""
    try:
        doc = safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"--calibration {path}: cannot read ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError(f"--calibration {path}: not a {SCHEMA} file")
    return Source(doc, path)


def committed_calibrations(data_dir: Path = DATA_DIR) -> list[Source]:
    """Every committed GPU calibration (CPU test runs are never used as GPU data; files of
    another schema, such as the serving-stack profiles, are skipped). Read once per process
    (:func:`forget_committed` after writing new files)."""
    return list(_committed(data_dir))


@cache
def _committed(data_dir: Path) -> tuple[Source, ...]:
    out = []
    for p in sorted(data_dir.glob("**/*.yaml")) if data_dir.exists() else []:
        head = p.read_text()[:2000]
        if SCHEMA not in head:
            continue
        s = read_calibration(p)
        if s.doc.get("source") != "cpu":
            out.append(s)
    return tuple(out)


def pick(sources: list[Source], term: str, gpu: GpuSpec, prefer: Source | None = None) -> Source | None:
    """The best source of ``term`` for ``gpu`` (``prefer``, a file the user named, wins if it has it)."""
    if prefer is not None and term in prefer.doc:
        return prefer
    have = [s for s in sources if term in s.doc]
    if not have:
        return None
    cat = gpu_catalog()

    def rank(s: Source) -> tuple[int, float, int]:
        other = cat.get(s.gpu)
        dist = 0.0 if s.gpu == gpu.key else (
            abs(math.log(other.bandwidth_tbps / gpu.bandwidth_tbps)) if other else 99.0)
        return (0 if s.gpu == gpu.key else 1, dist, 0 if s.measured else 1)

    return min(have, key=rank)


def resolve(src: Source | None, term: str, gpu: GpuSpec, sub: str | None = None) -> Term | None:
    """``term``'s coefficients for ``gpu``: as fitted, or scaled from the source's GPU."""
    if src is None:
        return None
    block = src.doc[term] if sub is None else src.doc[term].get(sub)
    if block is None:
        return None
    coef = {k: float(v) for k, v in block["coef"].items()}
    if src.gpu == gpu.key or src.gpu not in gpu_catalog():
        return Term(coef, src.label, src.gpu == gpu.key)
    s = gpu_catalog()[src.gpu]
    coef = scale_coefficients(coef, term, s.bandwidth_tbps / gpu.bandwidth_tbps, s.bf16_tflops / gpu.bf16_tflops)
    return Term(coef, f"extrapolated from {src.label} by bandwidth/compute", False)


def allreduce_term(sources: list[Source], gpu: GpuSpec, tp: int, prefer: Source | None = None) -> Term | None:
    """Per-call all-reduce (c0 + c_b x bytes) fitted for (GPU, TP); another NVLink GPU's fit
    at the same TP is scaled by the NVLink bandwidth ratio."""
    src = pick(sources, "allreduce", gpu, prefer)
    if tp <= 1 or src is None:
        return None
    by_tp = {int(k): {c: float(v) for c, v in e["coef"].items()}
             for k, e in src.doc["allreduce"]["by_tp"].items()}
    if not (min(by_tp) <= tp <= max(by_tp)) or not (src.gpu == gpu.key or gpu.nvlink_gbps > 0):
        return None
    label, own = src.label, src.gpu == gpu.key
    if tp in by_tp:
        coef = dict(by_tp[tp])
    else:  # between two fitted degrees (e.g. TP 3): interpolate in log2(TP)
        lo, hi = max(t for t in by_tp if t < tp), min(t for t in by_tp if t > tp)
        w = (math.log2(tp) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        coef = {c: (1 - w) * by_tp[lo].get(c, 0.0) + w * by_tp[hi].get(c, 0.0) for c in by_tp[lo]}
        label, own = f"{label}, interpolated between TP {lo} and {hi}", False
    src_gpu = gpu_catalog().get(src.gpu)
    if src.gpu == gpu.key or src_gpu is None:
        return Term(coef, label, own)
    coef["c_b"] *= src_gpu.nvlink_gbps / gpu.nvlink_gbps
    return Term(coef, f"extrapolated from {label} by nvlink ratio", False)


def copy_term(sources: list[Source], gpu: GpuSpec, prefer: Source | None = None) -> tuple[dict[str, float] | None, str]:
    src = pick(sources, "copy", gpu, prefer)
    if src is None:
        return None, f"datasheet pcie {gpu.pcie_gbps:g} GB/s"
    c = {k: float(v) for k, v in src.doc["copy"].items() if k.endswith("_gbps")}
    if src.gpu == gpu.key or src.gpu not in gpu_catalog():
        return c, src.label
    s = gpu_catalog()[src.gpu]
    r = gpu.pcie_gbps / s.pcie_gbps
    return {k: v * r for k, v in c.items()}, f"extrapolated from {src.label} by pcie ratio"


def forget_committed() -> None:
    """Drop the files read by :func:`committed_calibrations` (after writing new ones)."""
    _committed.cache_clear()
