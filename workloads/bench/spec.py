"""The benchmark datasets kvsim makes, as YAML specs for ``kvsim trace gen`` (validated with pydantic).

Each mirrors a load generator users run, with its defaults::

    dataset: random              # vllm bench serve --dataset-name random
    num_prompts: 1000
    input_len: 1024              # --random-input-len
    output_len: 128              # --random-output-len
    range_ratio: 0.0             # --random-range-ratio: lengths uniform in [len*(1-r), len*(1+r)]
    prefix_len: 0                # --random-prefix-len: one shared prefix on top of input_len
    request_rate: inf            # --request-rate (inf: all at t = 0), --burstiness
    burstiness: 1.0
    seed: 0

    dataset: prefix_repetition   # --prefix-repetition-{prefix-len,suffix-len,num-prefixes,output-len}
    dataset: sharegpt            # lengths of a table (path: the ShareGPT length table), vLLM's filters
    dataset: isl_osl             # fixed ISL/OSL points, e.g. InferenceX's [1k/1k, 1k/8k, 8k/1k]

An inference-perf config (``load`` + ``data.shared_prefix``) is read by
:mod:`workloads.bench.inference_perf`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PosInt = Annotated[int, Field(ge=1)]
NonNeg = Annotated[int, Field(ge=0)]


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: NonNeg | None = None
    num_prompts: PosInt = 1000
    request_rate: float = math.inf
    burstiness: Annotated[float, Field(gt=0)] = 1.0

    @field_validator("request_rate", mode="before")
    @classmethod
    def _rate(cls, v: object) -> object:
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            return math.inf
        return v

    @field_validator("request_rate")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0:
            raise ValueError("must be > 0 (or inf: everything at t = 0)")
        return v


class RandomSet(_Common):
    """vLLM's RandomDataset: prompt = prefix_len + U[floor(L(1-r)), ceil(L(1+r))] tokens, output
    U[max(1, floor(O(1-r))), ceil(O(1+r))]; the prefix is shared by every request."""

    dataset: Literal["random"]
    input_len: PosInt = 1024
    output_len: PosInt = 128
    range_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.0
    prefix_len: NonNeg = 0


class PrefixRepetitionSet(_Common):
    """vLLM's PrefixRepetitionRandomDataset: ``num_prefixes`` prefixes, each the head of
    num_prompts // num_prefixes prompts of prefix_len + suffix_len tokens, shuffled."""

    dataset: Literal["prefix_repetition"]
    prefix_len: NonNeg = 256
    suffix_len: NonNeg = 256
    num_prefixes: PosInt = 10
    output_len: PosInt = 128
    shuffle: bool = True

    @model_validator(mode="after")
    def _fits(self) -> PrefixRepetitionSet:
        if self.prefix_len + self.suffix_len < 1:
            raise ValueError("prefix_len + suffix_len must be >= 1")
        if self.num_prompts < self.num_prefixes:
            raise ValueError(f"num_prompts ({self.num_prompts}) must be >= num_prefixes ({self.num_prefixes})")
        return self


class ShareGPTSet(_Common):
    """Lengths drawn from a ShareGPT length table (any trace kvsim reads), with vLLM's sharegpt
    filters; ``path`` defaults to the Sarathi-Serve ShareGPT table under $KVSIM_DATA."""

    dataset: Literal["sharegpt"]
    path: str | None = None
    output_len: PosInt | None = None


#: InferenceX's ISL/OSL points (SemiAnalysis; random dataset, --request-rate inf, --max-concurrency swept)
INFERENCEX = ("1k/1k", "1k/8k", "8k/1k")


def parse_point(text: object) -> tuple[int, int]:
    """``"1k/8k"`` (k = 1,024, as InferenceX names its points), ``"1024/8192"`` or ``[1024, 8192]``."""
    parts = [str(x) for x in text] if isinstance(text, (list, tuple)) else str(text).split("/")
    if len(parts) != 2:
        raise ValueError(f"point {text!r}: expected ISL/OSL, e.g. 1k/8k or 1024/8192")
    out = []
    for p in parts:
        m = re.fullmatch(r"\s*(\d+)\s*([kK]?)\s*", p)
        if m is None or int(m.group(1)) < 1:
            raise ValueError(f"point {text!r}: {p!r} is not a token count (1024, 1k)")
        out.append(int(m.group(1)) * (1024 if m.group(2) else 1))
    return out[0], out[1]


class IslOslSet(_Common):
    """Fixed input/output length points (one trace each), as InferenceX sweeps them. ``range``:
    ``vllm`` = today's RandomDataset window [L(1-r), L(1+r)]; ``legacy`` = benchmark_serving.py's
    older [int(L r), L] (r = 1: fixed), which InferenceMAX's published client line uses with r = 0.8."""

    dataset: Literal["isl_osl"]
    points: list[str | tuple[int, int]] = Field(default_factory=lambda: list[str | tuple[int, int]](INFERENCEX),
                                                min_length=1)
    range_ratio: Annotated[float, Field(ge=0, le=1)] = 0.0
    range: Literal["vllm", "legacy"] = "vllm"
    prefix_len: NonNeg = 0

    @model_validator(mode="after")
    def _ratio(self) -> IslOslSet:
        for p in self.points:
            parse_point(p)
        if self.range == "vllm" and self.range_ratio >= 1:
            raise ValueError("range_ratio must be < 1 with range: vllm")
        if self.range == "legacy" and self.range_ratio == 0:
            raise ValueError("range: legacy needs range_ratio in (0, 1] (1 = fixed lengths)")
        return self

    def pairs(self) -> list[tuple[int, int]]:
        return [parse_point(p) for p in self.points]


DatasetSpec = Annotated[RandomSet | PrefixRepetitionSet | ShareGPTSet | IslOslSet, Field(discriminator="dataset")]
