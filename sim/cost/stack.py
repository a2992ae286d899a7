"""Serving-stack profiles: what the software around the GPU kernels adds to every step.

The calibrated model times the GPU kernels from operator measurements; the serving stack (its
scheduler, input preparation, sampling, Ray or RPC hops, Python kernel launches) is a separate,
named profile, fitted on public end-to-end step times (``calibration/stack_fit.py``)::

    t = max(eta[tp] x t_gpu, layers x launch_s)       GPU busy, or launch-bound (eager stacks)
        + cpu_s[tp] + per_seq_s x sequences           scheduler, sampling, inputs, outputs, Ray
        + [prefill step] (prefill_s + prefill_n2_s x prefill_tokens^2)

``eta`` is the stack's kernel efficiency relative to the profiled kernels (unfused or older
kernels, communication that does not overlap). Profiles: ``vllm`` (default; vLLM as measured by
Vidur's CPU profiles and DistServe's vLLM fits), ``lean`` (DistServe's own low-overhead engine)
and ``splitwise`` (the unnamed, launch-bound stack of Splitwise's DGX-A100 table). Values for a
TP degree the data did not cover are interpolated in log2(TP) (``fitted_tps`` says which were).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError

SCHEMA = "kvsim-stacks/1"
STACKS_PATH = Path(__file__).resolve().parents[2] / "calibration" / "data" / "stacks.yaml"
DEFAULT_STACK = "vllm"


@dataclass(frozen=True, slots=True)
class Band:
    """Step-time error band, as fractions: measured / predicted - 1 at the 10th and 90th
    percentile of held-out rows (``optimistic`` < 0 < ``pessimistic`` usually); the
    ``_extrapolated`` pair widens it by the GPU-transfer error (A100 fit -> H100 operators)."""

    optimistic: float = 0.0
    pessimistic: float = 0.0
    optimistic_extrapolated: float = 0.0
    pessimistic_extrapolated: float = 0.0
    basis: str = ""


@dataclass(frozen=True, slots=True)
class ServingStack:
    name: str
    description: str
    launch_s: float                              # per layer, when launch-bound
    per_seq_s: float
    prefill_s: float
    prefill_n2_s: float
    cpu_s: tuple[tuple[int, float], ...]         # (tp, seconds) at the TP degrees fitted
    eta: tuple[tuple[int, float], ...]           # (tp, efficiency multiplier)
    band: Band = Band()
    source: str = ""                             # the end-to-end rows it was fitted on
    gpu: str = ""                                # the GPU those rows were measured on

    @property
    def fitted_tps(self) -> tuple[int, ...]:
        return tuple(t for t, _ in self.eta)

    def at_tp(self, tp: int) -> tuple[float, float]:
        """(cpu_s, eta) at ``tp``: the fitted value, or interpolated in log2(TP), clamped."""
        return _interp(self.cpu_s, tp), _interp(self.eta, tp)


def _interp(points: tuple[tuple[int, float], ...], tp: int) -> float:
    pts = sorted(points)
    if not pts:
        return 0.0
    x = math.log2(tp)
    for (t0, v0), (t1, v1) in itertools.pairwise(pts):
        a, b = math.log2(t0), math.log2(t1)
        if a <= x <= b:
            return v0 + (v1 - v0) * (x - a) / (b - a)
    return pts[0][1] if x < math.log2(pts[0][0]) else pts[-1][1]


def _stack(name: str, d: dict[str, Any], where: str) -> ServingStack:
    try:
        c = d["coef"]
        by_tp = {int(t): v for t, v in d["by_tp"].items()}
        b = d.get("band") or {}
        fitted_on = d.get("fitted_on") or {}
        return ServingStack(
            name=name, description=str(d.get("description", "")),
            launch_s=float(c["launch_s"]), per_seq_s=float(c["per_seq_s"]),
            prefill_s=float(c["prefill_s"]), prefill_n2_s=float(c["prefill_n2_s"]),
            cpu_s=tuple((t, float(v["cpu_s"])) for t, v in sorted(by_tp.items())),
            eta=tuple((t, float(v["eta"])) for t, v in sorted(by_tp.items())),
            band=Band(float(b.get("optimistic", 0.0)), float(b.get("pessimistic", 0.0)),
                      float(b.get("optimistic_extrapolated", b.get("optimistic", 0.0))),
                      float(b.get("pessimistic_extrapolated", b.get("pessimistic", 0.0))), str(b.get("basis", ""))),
            source=str(fitted_on.get("source", "")), gpu=str(fitted_on.get("gpu", "")))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{where}: serving stack '{name}' is malformed ({e!r})") from None


def read_stacks(path: Path) -> dict[str, ServingStack]:
    """Every profile in a ``kvsim-stacks/1`` YAML (``yaml.safe_load`` only)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read serving-stack profiles ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("stacks"), dict):
        raise ConfigError(f"{path}: not a {SCHEMA} file")
    return {str(k): _stack(str(k), v, str(path)) for k, v in doc["stacks"].items()}


@cache
def committed_stacks() -> dict[str, ServingStack]:
    if not STACKS_PATH.exists():
        raise ConfigError(f"{STACKS_PATH}: no serving-stack profiles committed; run `kvsim calibrate fit`")
    return read_stacks(STACKS_PATH)


def resolve_stack(name: str) -> ServingStack:
    stacks = committed_stacks()
    if name not in stacks:
        raise ConfigError(f"--serving-stack {name!r}: expected one of {', '.join(stacks)}")
    return stacks[name]
