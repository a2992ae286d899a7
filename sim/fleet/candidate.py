"""A candidate serving unit: GPU, tensor parallelism and engine knobs -- one unified replica,
or one xPyD group (``x`` prefill and ``y`` decode instances behind a router, llm-d's naming)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sim.config.schema import SimConfig, make_config

# engine knobs the planner may search (SimConfig field names = vLLM engine-arg names)
KNOBS = ("gpu_memory_utilization", "block_size", "max_num_seqs", "max_num_batched_tokens",
         "allocator", "preemption")

Kw = tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Split:
    """One xPyD group: ``prefill`` + ``decode`` instances (the decode pool's ``router``, a
    :mod:`sim.cluster.router` spec) and the KV link between them (``links.yaml`` kind, optional
    per-lane GB/s override). ``prefill_kw`` / ``decode_kw``: per-role config overrides (e.g. a
    TP per role), over the candidate's GPU, TP and knobs."""

    prefill: int
    decode: int
    router: str = "kv-aware"
    link: str = "rdma-ndr"
    link_gbps: float | None = None
    prefill_kw: Kw = ()
    decode_kw: Kw = ()
    threshold: int = 0          # llm-d's pd threshold (uncached prompt tokens prefilled locally)

    def tp_of(self, role: str, tp: int) -> int:
        return int(dict(self.prefill_kw if role == "prefill" else self.decode_kw).get("tensor_parallel_size", tp))

    def text(self, tp: int) -> str:
        tps = (self.tp_of("prefill", tp), self.tp_of("decode", tp))
        return f"{self.prefill}P{self.decode}D" + ("" if tps == (tp, tp) else f" (TP {tps[0]}/{tps[1]})")


@dataclass(frozen=True, slots=True)
class Candidate:
    gpu: str
    tp: int
    knobs: Kw = ()
    split: Split | None = None   # None: one unified replica

    @property
    def shape(self) -> str:
        """``unified`` or the xPyD text, e.g. ``1P3D`` / ``1P3D (TP 2/1)``."""
        return "unified" if self.split is None else self.split.text(self.tp)

    @property
    def gpus_per_unit(self) -> int:
        s = self.split
        if s is None:
            return self.tp
        return s.prefill * s.tp_of("prefill", self.tp) + s.decode * s.tp_of("decode", self.tp)

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
    one candidate per GPU and knob setting (its ``tp`` is the decode TP), not one per ``tps``."""
    names = [k for k in KNOBS if knobs.get(k)]
    combos = list(itertools.product(*(knobs[k] for k in names))) or [()]
    out = []
    for g in gpus:
        for i, tp in enumerate(tps):
            for combo in combos:
                kw = tuple(zip(names, combo, strict=True))
                out.append(Candidate(g, tp, kw))
                for s in splits:
                    if not (s.tp_of("prefill", 0) and s.tp_of("decode", 0)):
                        out.append(Candidate(g, tp, kw, s))
                    elif i == 0:
                        out.append(Candidate(g, s.tp_of("decode", 0), kw, s))
    return out
