"""Serving-stack profiles: what the software around the GPU kernels adds to every step, by engine era.

The calibrated model times the GPU kernels from operator measurements; the serving stack (its
scheduler, input preparation, sampling, Ray or RPC hops, kernel launches) is a separate, named
profile fitted on public end-to-end measurements of one engine version (``calibration/``)::

    gpu   = eta[tp] x t_gpu, or with eta_tok / eta_attn (0: the same as eta):
            eta[tp] t_fixed + eta_tok t_dense + eta_attn t_attn, where t_fixed is the step's
            token-independent kernel time (weights read once, launches), t_dense the rest of the
            dense layers and t_attn the attention's KV and FLOP terms (CalibratedCost.kernel_parts),
            or max(gpu, layers x launch_s) when launch-bound
            (eager stacks; a CUDA-graph stack only under ``enforce_eager``)
    t     = gpu + cpu_s[tp] + per_seq_s x sequences
            + [prefill step] (prefill_s + prefill_n2_s x sum over sequences of chunk^2)
    sched = sched_s + sched_per_seq_s x sequences      scheduler CPU: added to t without async
            scheduling, hidden behind the GPU with it (t = max(t, sched))

Profiles (``calibration/data/stacks.yaml``): ``vllm-v1`` (vLLM >= 0.10, the default of the
``vllm-0.33`` presets), ``vllm-0.6`` (mid-2024 V0 with CUDA graphs), ``vllm-2023`` (eager, Ray
at TP >= 2; ``paper-v0``), ``lean``, ``splitwise``; ``vllm`` is a deprecated alias of
``vllm-2023``. ``--serving-stack FILE.yaml`` reads a profile fitted by ``kvsim calibrate fit
--from``. Values for a TP degree the data did not cover are interpolated in log2(TP).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sim.cost.regime import Regime, regime_of
from sim.errors import ConfigError
from sim.safe_yaml import safe_load

SCHEMA = "kvsim-stacks/1"
STACKS_PATH = Path(__file__).resolve().parents[2] / "calibration" / "data" / "stacks.yaml"
DEFAULT_STACK = "vllm-v1"
#: deprecated names -> profile (one release of grace; ``kvsim`` prints nothing, the docs say so)
ALIASES = {"vllm": "vllm-2023"}


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
    prefill_n2_s: float                          # x sum over prefill sequences of chunk^2
    cpu_s: tuple[tuple[int, float], ...]         # (tp, seconds) at the TP degrees fitted
    eta: tuple[tuple[int, float], ...]           # (tp, efficiency multiplier)
    band: Band = Band()
    source: str = ""                             # the end-to-end rows it was fitted on
    gpu: str = ""                                # the GPU those rows were measured on
    engine: str = ""                             # engine and version, e.g. "vLLM v0.15.1 (V1 engine)"
    cuda_graphs: bool = False                    # launch floor only under enforce_eager
    sched_s: float = 0.0                         # scheduler CPU per step (hidden under async scheduling)
    sched_per_seq_s: float = 0.0
    eta_tok: float = 0.0                         # efficiency of the token-dependent dense time (0: eta)
    eta_attn: float = 0.0                        # efficiency of the attention's token terms (0: eta_tok)
    kernels: str = "fits"                        # the kernel basis it was fitted over: "tables" (NVIDIA's
                                                 # vLLM operator tables) or "fits" (Vidur's operator fits)
    regime: Regime | None = None                 # where an end-to-end fit holds (sim/cost/regime.py)
    band_e2e: Band | None = None                 # held-out mean E2E and TTFT error bands of that fit
    band_ttft: Band | None = None

    @property
    def fitted_tps(self) -> tuple[int, ...]:
        return tuple(t for t, _ in self.eta)

    def at_tp(self, tp: int) -> tuple[float, float]:
        """(cpu_s, eta) at ``tp``: the fitted value, or interpolated in log2(TP), clamped."""
        return _interp(self.cpu_s, tp), _interp(self.eta, tp)

    def launch_floor(self, enforce_eager: bool) -> float:
        """Per-layer launch floor in force: an eager stack always, a CUDA-graph one when eager."""
        return self.launch_s if (enforce_eager or not self.cuda_graphs) else 0.0


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
        fitted_on = d.get("fitted_on") or {}
        return ServingStack(
            name=name, description=str(d.get("description", "")),
            launch_s=float(c["launch_s"]), per_seq_s=float(c["per_seq_s"]),
            prefill_s=float(c["prefill_s"]), prefill_n2_s=float(c["prefill_n2_s"]),
            cpu_s=tuple((t, float(v["cpu_s"])) for t, v in sorted(by_tp.items())),
            eta=tuple((t, float(v["eta"])) for t, v in sorted(by_tp.items())),
            band=_band(d.get("band") or {}),
            source=str(fitted_on.get("source", "")), gpu=str(fitted_on.get("gpu", "")),
            engine=str(d.get("engine", "")), cuda_graphs=bool(d.get("cuda_graphs", False)),
            sched_s=float(c.get("sched_s", 0.0)), sched_per_seq_s=float(c.get("sched_per_seq_s", 0.0)),
            eta_tok=float(c.get("eta_tok", 0.0)), eta_attn=float(c.get("eta_attn", 0.0)),
            kernels=_kernels(d.get("kernels", "fits"), name), regime=regime_of(d.get("regime")),
            band_e2e=_band(d["band_e2e"]) if d.get("band_e2e") else None,
            band_ttft=_band(d["band_ttft"]) if d.get("band_ttft") else None)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{where}: serving stack '{name}' is malformed ({e!r})") from None


def _band(b: dict[str, Any]) -> Band:
    return Band(float(b.get("optimistic", 0.0)), float(b.get("pessimistic", 0.0)),
                float(b.get("optimistic_extrapolated", b.get("optimistic", 0.0))),
                float(b.get("pessimistic_extrapolated", b.get("pessimistic", 0.0))), str(b.get("basis", "")))


def _kernels(v: object, name: str) -> str:
    if v not in ("tables", "fits"):
        raise ValueError(f"kernels: {v!r}, expected 'tables' or 'fits'")
    return str(v)


def read_stacks(path: Path) -> dict[str, ServingStack]:
    """Every profile in a ``kvsim-stacks/1`` YAML (``yaml.safe_load`` only)."""
    try:
        doc = safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read serving-stack profiles ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("stacks"), dict):
        raise ConfigError(f"{path}: not a {SCHEMA} file")
    return {str(k): _stack(str(k), v, str(path)) for k, v in doc["stacks"].items()}


@cache
def committed_stacks() -> dict[str, ServingStack]:
    if not STACKS_PATH.exists():
        raise ConfigError(f"{STACKS_PATH}: no serving-stack profiles committed; run `kvsim calibrate fit`")
    return read_stacks(STACKS_PATH)


def resolve_stack(name: str) -> ServingStack:
    """A committed profile by name (or a deprecated alias), or the one profile of a YAML file
    written by ``kvsim calibrate fit --from`` (a file with several takes its first)."""
    if name.endswith((".yaml", ".yml")):
        p = Path(name)
        if not p.exists():
            raise ConfigError(f"--serving-stack {name}: no such file")
        stacks = read_stacks(p)
        if not stacks:
            raise ConfigError(f"--serving-stack {name}: the file holds no profile")
        return next(iter(stacks.values()))
    stacks = committed_stacks()
    key = ALIASES.get(name, name)
    if key not in stacks:
        raise ConfigError(f"--serving-stack {name!r}: expected one of {', '.join(stacks)} "
                          "(or a profile YAML from `kvsim calibrate fit --from`)")
    return stacks[key]
