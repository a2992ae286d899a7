"""Benchmark workloads as kvsim traces: vLLM's ``vllm bench serve`` datasets (``random``,
``prefix_repetition``, ``sharegpt``, fixed ISL/OSL points) and inference-perf configs.

``kvsim trace gen SPEC OUT`` reads a YAML that is either one of these or a generator spec
(:mod:`workloads.gen`); a pasted ``vllm bench serve`` line builds the same specs
(:mod:`sim.config.vllm_bench`). The datasets' arrivals are vLLM's (``request_rate`` /
``burstiness``, :mod:`workloads.request_rate`), an inference-perf config's its stages'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import TypeAdapter, ValidationError

from sim.errors import ConfigError
from workloads.bench import datasets as D
from workloads.bench.inference_perf import inference_perf_trace, is_inference_perf
from workloads.bench.spec import DatasetSpec, IslOslSet, PrefixRepetitionSet, RandomSet, ShareGPTSet
from workloads.request_rate import arrival_stream, describe, request_rate_arrivals
from workloads.schema import Trace, validate

_ADAPTER: TypeAdapter[DatasetSpec] = TypeAdapter(DatasetSpec)


@dataclass(frozen=True, slots=True)
class BenchTrace:
    """One built workload: ``label`` is "" or the ISL/OSL point (``isl1024_osl8192``)."""

    label: str
    df: pd.DataFrame
    notes: tuple[str, ...]

    def trace(self, name: str) -> Trace:
        path = f"<{name}{'-' + self.label if self.label else ''}>"
        return Trace(df=validate(self.df, path), path=path, format="dataset", notes=self.notes)


def is_bench_yaml(raw: object) -> bool:
    return isinstance(raw, dict) and ("dataset" in raw or is_inference_perf(raw))


def parse_dataset(raw: object, where: str = "dataset") -> DatasetSpec:
    """A validated dataset spec; a bad key is one line naming it."""
    try:
        return _ADAPTER.validate_python(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"] if x not in ("random", "prefix_repetition", "sharegpt", "isl_osl"))
        raise ConfigError(f"{where}: {loc or 'dataset'}: {err['msg']}") from None


def _frames(spec: DatasetSpec, seed: int) -> list[tuple[str, D.Built]]:
    rng = np.random.default_rng(seed)
    if isinstance(spec, RandomSet):
        return [("", D.random_set(spec, rng))]
    if isinstance(spec, PrefixRepetitionSet):
        return [("", D.prefix_repetition_set(spec, rng))]
    if isinstance(spec, ShareGPTSet):
        return [("", D.sharegpt_set(spec, rng))]
    assert isinstance(spec, IslOslSet)
    return D.isl_osl_sets(spec, seed)


def build_dataset(spec: DatasetSpec, seed: int | None = None) -> list[BenchTrace]:
    """The dataset's trace(s), arrivals drawn at its request_rate / burstiness. ``seed``
    overrides the spec's (default 0): one seed for the lengths and, on its own stream, the arrivals."""
    s = seed if seed is not None else (spec.seed or 0)
    out = []
    for label, (df, notes) in _frames(spec, s):
        df["arrival_s"] = request_rate_arrivals(len(df), spec.request_rate, spec.burstiness, arrival_stream(s))
        out.append(BenchTrace(label, df, (*notes, f"{describe(spec.request_rate, spec.burstiness)}, seed {s}")))
    return out


def build_yaml(raw: object, where: str, seed: int | None = None) -> list[BenchTrace]:
    """A dataset spec's or an inference-perf config's trace(s) (see :func:`is_bench_yaml`)."""
    if is_inference_perf(raw):
        assert isinstance(raw, dict)
        df, notes = inference_perf_trace(raw, where, seed)
        return [BenchTrace("", df, tuple(notes))]
    return build_dataset(parse_dataset(raw, where), seed)


__all__ = ["BenchTrace", "DatasetSpec", "build_dataset", "build_yaml", "is_bench_yaml", "parse_dataset"]
