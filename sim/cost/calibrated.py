"""``--cost-model calibrated``: step times from fitted coefficients (``calibration/``).

Per step (kernel-and-calibration.md §6.2)::

    t = L (t_attn + t_gemm(QKV, O, up, down) + t_elementwise + t_kv_write)
        + t_gemm(LM head, rows = sequences) + 2 L t_allreduce (TP > 1) + t_swap + t_cpu_step

Each term comes from the best calibration file available for it, in this order: this GPU
measured by our harness, this GPU from Vidur's published profiles, another GPU scaled by the
datasheet bandwidth/compute ratios (labelled ``extrapolated``). A term no file covers falls back
to the datasheet roofline for that term only, and the model's ``name`` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from calibration.features import scale_coefficients
from sim.cost.batch import StepBatch
from sim.cost.roofline import allreduce_time
from sim.errors import ConfigError
from sim.specs import GpuSpec, ModelSpec, gpu_catalog

SCHEMA = "kvsim-calibration/1"
DATA_DIR = Path(__file__).resolve().parents[2] / "calibration" / "data"
NO_DATA = ("no calibration data committed yet; run calibration/run_gpu.py on a GPU, "
           "or use --cost-model roofline")
ETA_BW = 0.9  # roofline fallback (H200 measurement, specs.md)


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


def read_calibration(path: Path) -> Source:
    """One calibration YAML (``yaml.safe_load`` only)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"--calibration {path}: cannot read ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError(f"--calibration {path}: not a {SCHEMA} file")
    return Source(doc, path)


def committed_calibrations(data_dir: Path = DATA_DIR) -> list[Source]:
    """Every committed GPU calibration (CPU test runs are never used as GPU data)."""
    out = []
    for p in sorted(data_dir.glob("**/*.yaml")) if data_dir.exists() else []:
        s = read_calibration(p)
        if s.doc.get("source") != "cpu":
            out.append(s)
    return out


def _pick(sources: list[Source], term: str, gpu: GpuSpec) -> Source | None:
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


@dataclass(frozen=True, slots=True)
class Term:
    coef: dict[str, float]
    label: str


def _resolve(src: Source | None, term: str, gpu: GpuSpec, sub: str | None = None) -> Term | None:
    if src is None:
        return None
    block = src.doc[term] if sub is None else src.doc[term].get(sub)
    if block is None:
        return None
    coef = {k: float(v) for k, v in block["coef"].items()}
    if src.gpu == gpu.key or src.gpu not in gpu_catalog():
        return Term(coef, src.label)
    s = gpu_catalog()[src.gpu]
    coef = scale_coefficients(coef, term, s.bandwidth_tbps / gpu.bandwidth_tbps, s.bf16_tflops / gpu.bf16_tflops)
    return Term(coef, f"extrapolated from {src.label} by bandwidth/compute")


@dataclass(frozen=True, slots=True)
class CalibratedCost:
    """A StepCostModel whose coefficients are already folded with the model's shapes."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int
    attn_paged: Term
    attn_slab: Term
    gemm: Term | None
    elementwise: Term | None
    allreduce: Term | None
    copy: dict[str, float] | None
    labels: tuple[tuple[str, str], ...]
    cpu_step_s: float = 2e-3  # scheduler + launch per step: configurable, not calibrated

    @property
    def name(self) -> str:
        parts: dict[str, list[str]] = {}
        for term, label in self.labels:
            parts.setdefault(label, []).append(term)
        body = "; ".join(f"{'/'.join(t)}: {lab}" for lab, t in parts.items())
        return f"calibrated ({self.gpu.key}, tp={self.tp}; {body})"

    def _attention(self, b: StepBatch) -> float:
        m, tp = self.model, self.tp
        hq, hkv, d, nb = max(1, m.heads // tp), m.kv_heads_per_gpu(tp), m.head_dim, m.dtype_bytes
        c = (self.attn_paged if b.block_size > 0 else self.attn_slab).coef
        kv = b.decode_context_tokens + b.prefill_context_tokens
        pairs = b.prefill_attn_pairs + b.decode_context_tokens
        pages = b.pages_touched if b.block_size > 0 else 0
        return (c.get("c0", 0) + c.get("c_seq", 0) * b.num_seqs
                + c.get("c_row", 0) * b.num_tokens * hq * d * 2 * nb
                + c.get("c_kv", 0) * kv * 2 * hkv * d * nb
                + c.get("c_fl", 0) * pairs * 4 * hq * d + c.get("c_pg", 0) * pages * hkv)

    def _gemm(self, n: int, k: int, mm: int) -> float:
        nb = self.model.dtype_bytes
        w, act, fl = k * mm * nb, n * (k + mm) * nb, 2.0 * n * k * mm
        if self.gemm is None:  # roofline fallback
            return max((w + act) / (ETA_BW * self.gpu.bandwidth_bps), fl / (0.8 * self.gpu.flops))
        c = self.gemm.coef
        roof = max((w + act) / self.gpu.bandwidth_bps, fl / self.gpu.flops)
        return (c.get("c0", 0) + c.get("c_w", 0) * w + c.get("c_act", 0) * act
                + c.get("c_fl", 0) * fl + c.get("c_roof", 0) * roof)

    def _layer_dense(self, n: int) -> float:
        m, tp = self.model, self.tp
        hq, hkv, d = max(1, m.heads // tp), m.kv_heads_per_gpu(tp), m.head_dim
        ffn = m.ffn // tp
        t = (self._gemm(n, m.hidden, (hq + 2 * hkv) * d) + self._gemm(n, hq * d, m.hidden)
             + self._gemm(n, m.hidden, 2 * ffn) + self._gemm(n, ffn, m.hidden))
        nb = m.dtype_bytes
        if self.elementwise is not None:
            c = self.elementwise.coef
            t += c.get("c0", 0) + c.get("c_h", 0) * n * m.hidden * nb + c.get("c_f", 0) * n * ffn * nb
        else:
            t += 10 * n * m.hidden * nb / (ETA_BW * self.gpu.bandwidth_bps)
        kv_write = 2 * n * m.kv_heads_per_gpu(tp) * d * nb * 2  # read new K/V + write to cache
        return t + kv_write / (ETA_BW * self.gpu.bandwidth_bps)

    def _allreduce(self, n: int) -> float:
        if self.tp <= 1 or n == 0:
            return 0.0
        if self.allreduce is None:
            return allreduce_time(self.model, self.gpu, self.tp, n)
        c = self.allreduce.coef
        per_call = c.get("c0", 0) + c.get("c_b", 0) * n * self.model.hidden * self.model.dtype_bytes
        return 2 * self.model.layers * per_call

    def _swap(self, b: StepBatch) -> float:
        moved = (b.swap_in_blocks + b.swap_out_blocks) * b.block_bytes
        if moved == 0:
            return 0.0
        if self.copy is None:
            return moved / (self.gpu.pcie_gbps * 1e9)
        return (b.swap_in_blocks * b.block_bytes / (self.copy["h2d_gbps"] * 1e9)
                + b.swap_out_blocks * b.block_bytes / (self.copy["d2h_gbps"] * 1e9))

    def step_time(self, batch: StepBatch) -> float:
        n = batch.num_tokens
        if n == 0:
            return self.cpu_step_s + self._swap(batch)
        m = self.model
        layer = self._attention(batch) + self._layer_dense(n)
        lm_head = self._gemm(max(1, batch.num_seqs), m.hidden, m.vocab // self.tp)
        return (m.layers * layer + lm_head + self._allreduce(n) + self._swap(batch)
                + self.cpu_step_s)


def _copy_term(src: Source | None, gpu: GpuSpec) -> tuple[dict[str, float] | None, str]:
    if src is None:
        return None, f"datasheet pcie {gpu.pcie_gbps:g} GB/s"
    c = {k: float(v) for k, v in src.doc["copy"].items() if k.endswith("_gbps")}
    if src.gpu == gpu.key or src.gpu not in gpu_catalog():
        return c, src.label
    s = gpu_catalog()[src.gpu]
    r = gpu.pcie_gbps / s.pcie_gbps
    return {k: v * r for k, v in c.items()}, f"extrapolated from {src.label} by pcie ratio"


def build_calibrated(model: ModelSpec, gpu: GpuSpec, tp: int, sources: list[Source]) -> CalibratedCost:
    if not sources:
        raise ConfigError(NO_DATA)
    att_src = _pick(sources, "attention", gpu)
    paged = _resolve(att_src, "attention", gpu, "paged")
    if paged is None:
        raise ConfigError(f"calibrated: no attention fit for any GPU in {[str(s.path) for s in sources]}; "
                          "run calibration/run_gpu.py on a GPU, or use --cost-model roofline")
    slab = _resolve(att_src, "attention", gpu, "contiguous") or Term(
        {**paged.coef, "c_pg": 0.0}, paged.label + " (paged fit, page term dropped)")
    gemm = _resolve(_pick(sources, "gemm", gpu), "gemm", gpu)
    elem = _resolve(_pick(sources, "elementwise", gpu), "elementwise", gpu)
    ar_term, ar_label = None, "analytic (datasheet link)"
    ar_src = _pick(sources, "allreduce", gpu)
    if tp > 1 and ar_src is not None:
        by_tp = {int(k): v for k, v in ar_src.doc["allreduce"]["by_tp"].items()}
        if tp in by_tp and (ar_src.gpu == gpu.key or gpu.nvlink_gbps > 0):
            coef = {k: float(v) for k, v in by_tp[tp]["coef"].items()}
            src_gpu = gpu_catalog().get(ar_src.gpu)
            if ar_src.gpu == gpu.key or src_gpu is None:
                ar_label = ar_src.label
            else:
                coef["c_b"] *= src_gpu.nvlink_gbps / gpu.nvlink_gbps
                ar_label = f"extrapolated from {ar_src.label} by nvlink ratio"
            ar_term = Term(coef, ar_label)
    copy, copy_label = _copy_term(_pick(sources, "copy", gpu), gpu)
    labels: tuple[tuple[str, str], ...] = (("attention", paged.label),
              ("dense", gemm.label if gemm else "roofline (uncalibrated)"),
              ("elementwise", elem.label if elem else "roofline (uncalibrated)"),
              ("all-reduce", ar_label if tp > 1 else "n/a (tp=1)"),
              ("swap", copy_label), ("kv-write", "roofline (uncalibrated)"))
    labels = tuple(x for x in labels if x[1] != "n/a (tp=1)")
    return CalibratedCost(model, gpu, tp, paged, slab, gemm, elem, ar_term, copy, labels)


def load_calibrated_cost(model: ModelSpec, gpu: GpuSpec, tp: int, calibration: Path | None) -> CalibratedCost:
    """Entry point used by ``sim.cost.build_cost_model("calibrated", ...)``."""
    if calibration is None:
        return build_calibrated(model, gpu, tp, committed_calibrations())
    p = Path(calibration)
    if p.is_dir():
        p = p / "fit.yaml"
    if not p.exists():
        raise ConfigError(f"--calibration {calibration}: no such file (expected a fit YAML or a "
                          "directory with fit.yaml)")
    return build_calibrated(model, gpu, tp, [read_calibration(p)])
