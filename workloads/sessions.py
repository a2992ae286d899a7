"""Multi-turn session traces from a few distributions (closed loop: :mod:`sim.run.clients`).

Example spec (YAML, lengths as in :mod:`workloads.gen.spec`)::

    seed: 7
    sessions: 50
    start_rate: 0.5                       # sessions start as a Poisson process (req/s); 0: all at t = 0
    turns: {kind: uniform, low: 2, high: 6}
    new_tokens: {kind: lognormal, median: 200, sigma: 0.8}   # the user's new text per turn
    output: {kind: uniform, low: 50, high: 300}
    think_time_s: {mean: 10.0, cv: 1.0}   # Gamma (cv 1: exponential); a number: fixed
    max_model_len: 8192                   # a session ends before a turn that would not fit

Each turn's ``prompt_token_ids`` are the previous turn's prompt, then ids standing for its
output, then new ids: the earlier turns are an exact prefix, so a later turn's prefix-cache hits
follow from the block hashes (the simulated earlier turn is given the output ids it stands for).
Ids are unique per session, so sessions share nothing. Turns are numbered from 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from workloads.gen import lengths as L
from workloads.gen.generate import read_spec_yaml, validated
from workloads.gen.spec import Lengths


class Think(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    mean: Annotated[float, Field(ge=0)]
    cv: Annotated[float, Field(gt=0)] = 1.0


class SessionSpec(BaseModel):
    """A session workload (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int | None = None
    sessions: Annotated[int, Field(ge=1)]
    start_rate: Annotated[float, Field(ge=0)] = 0.0
    turns: Lengths
    new_tokens: Lengths
    output: Lengths
    think_time_s: Annotated[float, Field(ge=0)] | Think = 0.0
    max_model_len: Annotated[int, Field(ge=2)] | None = None


def parse_sessions(raw: object, where: str = "spec") -> SessionSpec:
    return validated(SessionSpec, raw, where)


def load_sessions(path: str | Path) -> SessionSpec:
    return parse_sessions(read_spec_yaml(path), str(path))


def _think(spec: SessionSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    t = spec.think_time_s
    if not isinstance(t, Think):
        return np.full(n, float(t))
    if t.mean == 0:
        return np.zeros(n)
    shape = 1.0 / (t.cv * t.cv)
    return rng.gamma(shape, t.mean / shape, n)


def generate_sessions(spec: SessionSpec, rng: np.random.Generator) -> pd.DataFrame:
    """A normalized session trace (rows by session start, then turn): draws in a fixed order
    (starts, turns, then per turn new length, output length, think time) so a seed fixes it."""
    n = spec.sessions
    starts = np.cumsum(rng.exponential(1.0 / spec.start_rate, n)) if spec.start_rate > 0 else np.zeros(n)
    turns = L.quantile(spec.turns, rng.random(n), "turns")
    total = int(turns.sum())
    new = L.quantile(spec.new_tokens, rng.random(total), "new_tokens")
    out = L.quantile(spec.output, rng.random(total), "output_tokens")
    think = _think(spec, rng, total)
    cap = spec.max_model_len if spec.max_model_len is not None else np.iinfo(np.int64).max
    rows: list[dict[str, object]] = []
    k, next_id = 0, 1
    for s in range(n):
        ids: list[int] = []
        for turn in range(1, int(turns[s]) + 1):
            fresh = list(range(next_id, next_id + int(new[k])))
            next_id += len(fresh)
            prompt = ids + fresh
            if len(prompt) > cap - 1:
                k += int(turns[s]) - turn + 1  # the session ends here: skip its remaining draws
                break
            o = max(1, min(int(out[k]), cap - len(prompt)))
            rows.append({"arrival_s": float(starts[s]), "prompt_tokens": len(prompt), "output_tokens": o,
                         "prompt_token_ids": prompt, "session_id": f"s{s}", "turn": turn,
                         "think_time_s": float(think[k]) if turn > 1 else 0.0})
            ids = prompt + list(range(next_id, next_id + o))  # ids standing for the answer
            next_id += o
            k += 1
    df = pd.DataFrame(rows)
    df.insert(3, "request_id", [str(i) for i in range(len(df))])
    return df
