"""``--cost-model roofline``: an analytic, **uncalibrated** step time from datasheet numbers.

Also home of the two analytic terms the calibrated model falls back on when no measurement
covers them: the ring all-reduce of tensor parallelism and the PCIe swap transfer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.cost.batch import CostBasis, StepBatch
from sim.cost.floor import PhysicsFloor, build_floor
from sim.model.catalog import GpuSpec, ModelSpec


def allreduce_time(model: ModelSpec, gpu: GpuSpec, tp: int, num_tokens: int) -> float:
    """Analytic ring all-reduce time for one step (2 per layer, Megatron-style TP).

    Bytes per all-reduce = tokens x hidden x dtype; a ring moves 2 (tp-1)/tp of it per GPU.
    Link: NVLink when the GPU has it, else PCIe. Plus a fixed ~8 us latency per call.
    """
    if tp <= 1 or num_tokens == 0:
        return 0.0
    link = (gpu.nvlink_gbps if gpu.nvlink_gbps > 0 else gpu.pcie_gbps) * 1e9
    nbytes = num_tokens * model.hidden * model.dtype_bytes
    per_call = 2 * (tp - 1) / tp * nbytes / link + 8e-6
    return 2 * model.layers * per_call


@dataclass(frozen=True, slots=True)
class RooflineCost:
    """Analytic roofline, **uncalibrated**: max(bytes / (eta_bw x BW), FLOPs / (eta_c x peak)).

    Bytes = weights (once per step) + KV read by attention + KV written; FLOPs = 2 x params x
    tokens + attention (4 x head_dim x heads x layers per query-key pair). A per-page overhead
    (``page_overhead_s``) models the kernel's cost of gathering scattered pages; a fixed
    per-step launch/scheduling overhead is added. Efficiency factors default to the H200
    measurements in specs.md (eta_bw 0.9, eta_c 0.8) -- still a guess for other GPUs. Its byte and
    FLOP counts exceed the physics floor's (:mod:`sim.cost.floor`: every weight, every layer's KV,
    the BF16 peak); the kernel time is still held at that floor, so no step can beat it.
    """

    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    eta_bw: float = 0.9
    eta_c: float = 0.8
    step_overhead_s: float = 2e-3
    page_overhead_s: float = 2e-9
    pcie_block_overhead_s: float = 1e-5
    _c: tuple[float, ...] = field(default=(), init=False, repr=False, compare=False)
    _floor: PhysicsFloor | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def name(self) -> str:
        return f"roofline (uncalibrated; {self.gpu.key}, tp={self.tp})"

    @property
    def basis(self) -> CostBasis:
        return CostBasis("uncalibrated", f"datasheet roofline of {self.gpu.key} (eta_bw {self.eta_bw:g}, "
                         f"eta_c {self.eta_c:g} from one H200 measurement), fixed {self.step_overhead_s * 1e3:g} ms per step")

    def __post_init__(self) -> None:
        m, tp, g = self.model, self.tp, self.gpu
        consts = (
            m.weight_bytes / tp,                                   # weight bytes per GPU
            m.kv_bytes_per_token(tp),                              # KV bytes per token
            4.0 * m.head_dim * m.heads / tp * m.layers,            # FLOPs per query-key pair
            2.0 * m.params_b * 1e9 / tp,                           # dense FLOPs per token
            self.eta_bw * g.bandwidth_bps,
            self.eta_c * g.flops,
            self.page_overhead_s * m.layers,                       # per page touched
        )
        object.__setattr__(self, "_c", consts)
        object.__setattr__(self, "_floor", build_floor(m, g, tp))

    def step_time(self, batch: StepBatch) -> float:
        (prefill_tokens, _, pairs, prefill_ctx, decodes, decode_ctx, pages, _,
         swap_out, swap_in, _) = batch
        tokens = prefill_tokens + decodes
        if tokens == 0 and swap_in == 0 and swap_out == 0:
            return self.step_overhead_s
        w_bytes, kv_tok, attn_per_pair, flops_per_tok, bw, peak, per_page = self._c
        nbytes = w_bytes + kv_tok * (decode_ctx + prefill_ctx + tokens)
        flops = flops_per_tok * tokens + attn_per_pair * (pairs + decode_ctx)
        floor = self._floor.step(batch) if self._floor is not None else 0.0
        t = max(nbytes / bw, flops / peak, floor) + per_page * pages
        if self.tp > 1:
            t += allreduce_time(self.model, self.gpu, self.tp, tokens)
        if swap_in or swap_out:
            t += swap_time(batch, self.gpu, self.pcie_block_overhead_s)
        return t + self.step_overhead_s


def swap_time(batch: StepBatch, gpu: GpuSpec, per_block_s: float) -> float:
    """Swap transfer over PCIe: per-block overhead + bytes / bandwidth, both directions."""
    blocks = batch.swap_in_blocks + batch.swap_out_blocks
    if blocks == 0:
        return 0.0
    return blocks * per_block_s + blocks * batch.block_bytes / (gpu.pcie_gbps * 1e9)
