"""A candidate serving unit: GPU, tensor parallelism and engine knobs -- one unified replica,
or one xPyD group (``x`` prefill and ``y`` decode instances behind a router, llm-d's naming)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.config.schema import SimConfig, make_config
from sim.fleet.prices import GpuPrice, PricePoint

# engine knobs the planner may search (SimConfig field names = vLLM engine-arg names)
KNOBS = ("gpu_memory_utilization", "block_size", "max_num_seqs", "max_num_batched_tokens",
         "allocator", "preemption")

Kw = tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Split:
    """One xPyD group: ``prefill`` + ``decode`` instances (the decode pool's ``router``, a
    :mod:`sim.cluster.router` spec) and the KV link between them (``links.yaml`` kind, optional
    per-lane GB/s override). ``prefill_kw`` / ``decode_kw``: per-role config overrides (e.g. a
    TP or a GPU per role), over the candidate's GPU, TP and knobs. Both roles keep the same
    ``block_size`` (KV moves block by block), so a GPU per role changes only each role's KV pool
    and step times (each instance's config carries its own ``gpu``, hence its own cost model)."""

    prefill: int
    decode: int
    router: str = "kv-aware"
    link: str = "rdma-ndr"
    link_gbps: float | None = None
    prefill_kw: Kw = ()
    decode_kw: Kw = ()
    threshold: int = 0          # llm-d's pd threshold (uncached prompt tokens prefilled locally)

    def _kw(self, role: str) -> dict[str, Any]:
        return dict(self.prefill_kw if role == "prefill" else self.decode_kw)

    def tp_of(self, role: str, tp: int) -> int:
        return int(self._kw(role).get("tensor_parallel_size", tp))

    def gpu_of(self, role: str, gpu: str) -> str:
        return str(self._kw(role).get("gpu", gpu))

    def text(self, tp: int, gpu: str = "") -> str:
        """``1P3D``, ``1P3D (TP 2/1)``, or with a GPU per role ``1P3D (h200 TP2 / h100 TP1)``."""
        tps = (self.tp_of("prefill", tp), self.tp_of("decode", tp))
        gpus = (self.gpu_of("prefill", gpu), self.gpu_of("decode", gpu))
        head = f"{self.prefill}P{self.decode}D"
        if gpus != (gpu, gpu):
            return head + f" ({gpus[0]} TP{tps[0]} / {gpus[1]} TP{tps[1]})"
        return head + ("" if tps == (tp, tp) else f" (TP {tps[0]}/{tps[1]})")


@dataclass(frozen=True, slots=True)
class Candidate:
    gpu: str
    tp: int
    knobs: Kw = ()
    split: Split | None = None   # None: one unified replica

    @property
    def shape(self) -> str:
        """``unified`` or the xPyD text, e.g. ``1P3D`` / ``1P3D (TP 2/1)``."""
        return "unified" if self.split is None else self.split.text(self.tp, self.gpu)

    @property
    def gpus_per_unit(self) -> int:
        s = self.split
        if s is None:
            return self.tp
        return s.prefill * s.tp_of("prefill", self.tp) + s.decode * s.tp_of("decode", self.tp)

    def role_gpus(self) -> list[tuple[str, int]]:
        """(GPU, GPU count) per role of one unit: ``[(gpu, tp)]`` unified, prefill then decode for a split."""
        s = self.split
        if s is None:
            return [(self.gpu, self.tp)]
        return [(s.gpu_of(r, self.gpu), n * s.tp_of(r, self.tp)) for r, n in (("prefill", s.prefill), ("decode", s.decode))]

    @property
    def gpu_names(self) -> tuple[str, ...]:
        """The distinct GPU types of one unit (two for an xPyD group with a GPU per role)."""
        return tuple(dict.fromkeys(g for g, _ in self.role_gpus()))

    def unit_price(self, prices: Mapping[str, GpuPrice], point: PricePoint = "typical") -> float:
        """$/h of one unit: each role's GPUs at its own GPU's price."""
        return sum(n * prices[g].at(point) for g, n in self.role_gpus())

    @property
    def label(self) -> str:
        k = ",".join(f"{n}={v}" for n, v in self.knobs)
        pd_ = "" if self.split is None else f" {self.shape} {self.split.router}"
        return f"{self.gpu} tp{self.tp}{pd_}" + (f" [{k}]" if k else "")

    @property
    def knob_text(self) -> str:
        return " ".join(f"{n}={v}" for n, v in self.knobs) or "defaults"

    def settings(self, base: dict[str, Any], role: str = "unified") -> dict[str, Any]:
        """The config settings of one instance of ``role``: ``base``, this candidate's, the role's."""
        kw = dict(base, gpu=self.gpu, tensor_parallel_size=self.tp, **dict(self.knobs))
        if self.split is not None and role in ("prefill", "decode"):
            kw.update(self.split.prefill_kw if role == "prefill" else self.split.decode_kw)
        return kw

    def config(self, base: dict[str, Any], role: str = "unified") -> SimConfig:
        """The SimConfig of one replica (or one ``role`` instance of a split)."""
        return make_config("flags", **self.settings(base, role))


def grid(gpus: list[str], tps: list[int], knobs: dict[str, list[Any]],
         splits: Sequence[Split] = ()) -> list[Candidate]:
    """Cartesian product of GPUs x TP degrees x knob values (knobs with one value included),
    each unified and as every split of ``splits``. A split that sets the TP of both roles is
    one candidate per GPU and knob setting (its ``tp`` is the decode TP), not one per ``tps``;
    one that sets the GPU of both roles is one candidate per TP and knob setting (its ``gpu``
    is the decode GPU), not one per ``gpus``."""
    names = [k for k in KNOBS if knobs.get(k)]
    combos = list(itertools.product(*(knobs[k] for k in names))) or [()]
    out = []
    for j, g in enumerate(gpus):
        for i, tp in enumerate(tps):
            for combo in combos:
                kw = tuple(zip(names, combo, strict=True))
                out.append(Candidate(g, tp, kw))
                for s in splits:
                    tp_set = bool(s.tp_of("prefill", 0) and s.tp_of("decode", 0))
                    gpu_set = bool(s.gpu_of("prefill", "") and s.gpu_of("decode", ""))
                    if (tp_set and i > 0) or (gpu_set and j > 0):
                        continue
                    out.append(Candidate(s.gpu_of("decode", g) if gpu_set else g,
                                         s.tp_of("decode", tp) if tp_set else tp, kw, s))
    return out
