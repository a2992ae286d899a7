"""How clients send a workload: ``vllm bench serve``'s load options, from kvsim's own flags
(``--request-rate``, ``--burstiness``) or a pasted ``vllm bench serve`` line, and the trace they
make (:func:`load_workload`) for ``simulate``, ``sweep`` and ``plan``.

- a trace file: its requests in order (the first ``num_prompts``), at their own times, or at
  vLLM's request-rate times when ``request_rate`` is given (the trace's times are replaced);
- a dataset (the line's ``--dataset-name``; vLLM's default ``random`` when the line names none and
  no trace file is given): built with the line's dataset flags, at ``request_rate`` (default inf).

A dataset and a trace file together are refused, as are ``--burstiness`` without a finite rate.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from sim.errors import ConfigError
from workloads.bench import build_dataset, parse_dataset
from workloads.bench.spec import DatasetSpec
from workloads.request_rate import apply_request_rate, check_burstiness, parse_rate
from workloads.resolution import spread_trace
from workloads.schema import Trace


@dataclass(frozen=True, slots=True)
class Load:
    """The load options; None = not given."""

    request_rate: float | None = None    # req/s, inf = all at t = 0; None: the trace's own times
    burstiness: float | None = None      # gamma shape of the gaps (default 1: Poisson)
    num_prompts: int | None = None       # requests to send: a trace's first N, a dataset's size
    dataset: DatasetSpec | None = None   # vLLM's dataset (defaults filled in)
    dataset_named: bool = False          # the line named it (or set one of its flags)
    origin: str = "flags"                # where the options came from, for messages

    def __post_init__(self) -> None:
        if self.request_rate is not None:
            parse_rate(self.request_rate, self._flag("--request-rate"))
        if self.burstiness is not None:
            check_burstiness(self.burstiness, self._flag("--burstiness"))
        if self.num_prompts is not None and self.num_prompts < 1:
            raise ConfigError(f"{self._flag('--num-prompts')} {self.num_prompts}: must be >= 1")

    def _flag(self, flag: str) -> str:
        return flag if self.origin == "flags" else f"{self.origin} {flag}"

    @property
    def given(self) -> bool:
        return any(v is not None for v in (self.request_rate, self.burstiness, self.num_prompts, self.dataset))

    def over(self, base: Load) -> Load:
        """These options where given, else ``base``'s (kvsim's flags over a pasted line)."""
        pick = {f.name: getattr(self, f.name) if getattr(self, f.name) is not None else getattr(base, f.name)
                for f in dataclasses.fields(self) if f.name not in ("dataset_named", "origin")}
        return Load(**pick, dataset_named=self.dataset_named or base.dataset_named,
                    origin=self.origin if self.given else base.origin)

    def as_json(self, seed: int, with_dataset: bool) -> dict[str, object]:
        """The options as plain JSON values (a plan bundle's inputs; inf as "inf")."""
        rate = self.request_rate
        return {"request_rate": "inf" if rate is not None and math.isinf(rate) else rate,
                "burstiness": self.burstiness, "num_prompts": self.num_prompts, "seed": seed,
                "dataset": self.dataset.model_dump(mode="json", exclude={"seed", "num_prompts", "request_rate", "burstiness"})
                if with_dataset and self.dataset else None}

    def check(self) -> None:
        """Refuse a burstiness that cannot apply (no rate, or inf: every request at t = 0)."""
        b = self.burstiness
        if b is None or b == 1.0:
            return
        if self.request_rate is None:
            raise ConfigError(f"{self._flag('--burstiness')} {b:g} needs --request-rate (it shapes vLLM's "
                              "request-rate gaps; a trace keeps its own times)")
        if math.isinf(self.request_rate):
            raise ConfigError(f"{self._flag('--burstiness')} {b:g}: no effect at --request-rate inf (every "
                              "request at t = 0); drop it or give a finite rate")


def _dataset_trace(load: Load, seed: int) -> Trace:
    assert load.dataset is not None
    spec = parse_dataset({  # validated again: num_prompts meets the dataset's other knobs here
        **load.dataset.model_dump(), "request_rate": load.request_rate if load.request_rate is not None else math.inf,
        "burstiness": load.burstiness or 1.0,
        **({"num_prompts": load.num_prompts} if load.num_prompts is not None else {})}, load.origin)
    built = build_dataset(spec, seed)
    if len(built) != 1:
        raise ConfigError(f"{load.origin}: an ISL/OSL grid makes {len(built)} traces; run one point at a time")
    return built[0].trace(f"vllm-{spec.dataset}")


def _first(trace: Trace, n: int, origin: str) -> Trace:
    if n > trace.num_requests:
        raise ConfigError(f"{origin} --num-prompts {n}: {trace.path} has {trace.num_requests:,} requests")
    df = trace.df.iloc[:n].reset_index(drop=True)
    note = f"the first {n:,} of {trace.num_requests:,} requests (--num-prompts)"
    return dataclasses.replace(trace, df=df, notes=(*trace.notes, note))


def load_workload(load: Load, trace: Trace | None, seed: int) -> Trace:
    """The trace ``load`` sends (module docstring). ``trace``: the loaded trace file, or None when
    none was given (then the load's dataset, if any; the caller's default trace otherwise: pass it)."""
    load.check()
    if trace is not None and load.dataset_named:
        raise ConfigError(f"{load.origin}: a dataset (--dataset-name or its flags) and a trace file "
                          f"({trace.path}): give one")
    if trace is None:
        if load.dataset is None:
            raise ConfigError("no trace: give a trace file or a dataset")
        return _dataset_trace(load, seed)
    if load.num_prompts is not None:
        trace = _first(trace, load.num_prompts, load.origin if load.origin != "flags" else "")
    if load.request_rate is not None:
        trace = apply_request_rate(trace, load.request_rate, load.burstiness or 1.0, seed)
    return trace


def workload_of(load: Load, path: Path | None, default: Path | None, seed: int, fmt: str | None = None,
                skip_bad: bool = False, jitter_seed: int | None = None) -> Trace:
    """:func:`load_workload` on the trace at ``path`` (``default`` when neither a path nor a
    dataset is given; None: one is needed), read with :func:`workloads.loader.load_trace`.
    ``jitter_seed``: spread a coarse file's stamps now, on its own clock (:func:`spread_trace`)."""
    from workloads.loader import load_trace

    if path is None and load.dataset is not None:
        return load_workload(load, None, seed)
    src = path or default
    if src is None:
        raise ConfigError("give a trace file, or a `vllm bench serve` line (after `--`) that makes a dataset")
    tr = load_trace(src, fmt=fmt, skip_bad=skip_bad)
    return load_workload(load, tr if jitter_seed is None else spread_trace(tr, jitter_seed), seed)
