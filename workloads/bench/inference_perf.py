"""An inference-perf (llm-d) config YAML -> a kvsim trace: its load stages over ``shared_prefix`` data.

What inference-perf sends, after ``inference_perf/loadgen`` and ``datagen/shared_prefix_datagen.py``:

- **data**: ``num_groups`` system prompts of ``system_prompt_len`` tokens, each shared by
  ``num_prompts_per_group`` prompts that add ``question_len`` tokens of their own (the newer
  names ``num_unique_system_prompts`` / ``num_users_per_system_prompt`` are read too); every
  request asks for ``output_len`` tokens. The prompts are shuffled once; request ``j`` of a stage
  sends prompt ``j mod P``, so prompts repeat (whole-prompt prefix hits) once a stage sends more
  than ``P`` = groups x prompts per group.
- **load**: ``stages`` of ``rate`` req/s for ``duration`` s, ``int(rate * duration)`` requests
  each. ``constant``: exponential gaps rescaled to sum to the stage's duration (inference-perf's
  ConstantLoadTimer); ``poisson``: a Poisson count per second, spread the same way within it.
  Stage ``k + 1`` starts ``interval`` s (default 1) after stage ``k``'s last send; inference-perf
  also waits for stage ``k``'s requests to finish first, so kvsim's gap is a lower bound.

Refused in one line: other data types, length distributions, multi-turn chat and the
``concurrent`` / ``trace_replay`` / sweep load modes. Other top-level sections (api, server,
metrics, report, storage, tokenizer) change nothing kvsim simulates; they are listed in a note.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ConfigError
from workloads.bench.prefix_ids import head_hash_ids

SHARED_PREFIX = {"num_groups": ("num_groups", "num_unique_system_prompts", 10),
                 "per_group": ("num_prompts_per_group", "num_users_per_system_prompt", 10),
                 "system_prompt_len": ("system_prompt_len", None, 100), "question_len": ("question_len", None, 50),
                 "output_len": ("output_len", None, 50)}
SECTIONS = ("load", "data")


def is_inference_perf(raw: object) -> bool:
    return isinstance(raw, dict) and "load" in raw and "data" in raw and "dataset" not in raw


def _num(d: dict[str, Any], key: str, where: str, default: float | None = None, zero_ok: bool = False,
         whole: bool = False) -> float:
    """``d[key]`` (or ``default``) as a finite number > 0 (>= 0 with ``zero_ok``); one line naming the key."""
    v = d.get(key, default)
    if isinstance(v, dict):
        raise ConfigError(f"{where}.{key}: not modelled yet: a length distribution (give one number)")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or (v < 0 if zero_ok else v <= 0) or (whole and v != int(v)):
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{where}.{key}: expected {kind} {'>=' if zero_ok else '>'} 0, got {v!r}")
    return float(v)


def _shared_prefix(data: dict[str, Any], where: str) -> dict[str, int]:
    kind = str(data.get("type", "mock"))
    if kind != "shared_prefix":
        raise ConfigError(f"{where}.data.type: not modelled: inference-perf data {kind!r} (kvsim reads shared_prefix)")
    sp = data.get("shared_prefix") or {}
    if not isinstance(sp, dict):
        raise ConfigError(f"{where}.data.shared_prefix: expected a mapping")
    if sp.get("enable_multi_turn_chat"):
        raise ConfigError(f"{where}.data.shared_prefix.enable_multi_turn_chat: not modelled yet: multi-turn sessions (issue 49)")
    out = {}
    for name, (key, alias, default) in SHARED_PREFIX.items():
        k = alias if alias and alias in sp else key
        zero_ok = name in ("system_prompt_len", "question_len")
        out[name] = int(_num(sp, k, f"{where}.data.shared_prefix", default, zero_ok=zero_ok, whole=True))
    if out["system_prompt_len"] + out["question_len"] < 1:
        raise ConfigError(f"{where}.data.shared_prefix: system_prompt_len + question_len must be >= 1")
    return out


def _stages(load: dict[str, Any], where: str) -> tuple[str, list[tuple[float, float]], float]:
    kind = str(load.get("type", "constant"))
    if kind == "concurrent":
        raise ConfigError(f"{where}.load.type: not modelled yet: concurrent (closed loop; issue 49)")
    if kind not in ("constant", "poisson"):
        raise ConfigError(f"{where}.load.type: not modelled: {kind!r} (kvsim reads constant and poisson stages)")
    if load.get("sweep"):
        raise ConfigError(f"{where}.load.sweep: not modelled: a saturation sweep probes a live server; give stages")
    stages = load.get("stages")
    if not isinstance(stages, list) or not stages:
        raise ConfigError(f"{where}.load.stages: expected a list of {{rate, duration}}")
    out = []
    for i, st in enumerate(stages):
        w = f"{where}.load.stages[{i}]"
        if not isinstance(st, dict):
            raise ConfigError(f"{w}: expected a mapping with rate and duration")
        if st.get("num_requests") is not None or st.get("concurrency_level") is not None:
            raise ConfigError(f"{w}: not modelled yet: a concurrent stage (closed loop; issue 49)")
        out.append((_num(st, "rate", w), _num(st, "duration", w)))
    interval = _num(load, "interval", f"{where}.load", 1.0, zero_ok=True)
    return kind, out, interval


def _stage_times(kind: str, rate: float, duration: float, rng: np.random.Generator) -> np.ndarray:
    """Send offsets of one stage (from its start), ``int(rate * duration)`` of them."""
    n = int(rate * duration)
    if kind == "constant":
        gaps = rng.exponential(1.0 / rate, n)
        return np.cumsum(gaps * (duration / gaps.sum())) if n else np.zeros(0)
    out: list[np.ndarray] = []
    second, have = 0, 0
    while have < n:
        c = int(rng.poisson(rate))
        if c:
            g = rng.exponential(1.0 / c, c)
            out.append(second + np.cumsum(g / g.sum()))
            have += c
        second += 1
    return np.concatenate(out)[:n] if out else np.zeros(0)


def inference_perf_trace(raw: dict[str, Any], where: str, seed: int | None = None) -> tuple[pd.DataFrame, list[str]]:
    """(trace frame, notes) of an inference-perf config (module docstring); ``seed`` overrides
    ``load.base_seed`` / ``data.shared_prefix.seed``."""
    load, data = raw.get("load"), raw.get("data")
    if not isinstance(load, dict) or not isinstance(data, dict):
        raise ConfigError(f"{where}: load and data must be mappings")
    kind, stages, interval = _stages(load, where)
    sp = _shared_prefix(data, where)
    s = seed if seed is not None else int(load.get("base_seed") or (data.get("shared_prefix") or {}).get("seed") or 0)
    rng = np.random.default_rng(s)
    n_prompts = sp["num_groups"] * sp["per_group"]
    groups = np.repeat(np.arange(sp["num_groups"], dtype=np.int64), sp["per_group"])[rng.permutation(n_prompts)]
    plen = np.full(n_prompts, sp["system_prompt_len"] + sp["question_len"], dtype=np.int64)
    ids, tph = head_hash_ids(groups, sp["system_prompt_len"], plen)
    rows: list[tuple[float, int, str]] = []
    start = 0.0
    for k, (rate, dur) in enumerate(stages):
        t = start + _stage_times(kind, rate, dur, rng)
        rows += [(float(x), j % n_prompts, f"s{k}-{j}") for j, x in enumerate(t)]
        start = max(start + dur, float(t[-1]) if len(t) else 0.0) + interval
    if not rows:
        raise ConfigError(f"{where}.load.stages: every stage sends int(rate * duration) = 0 requests")
    arrival, prompt_ix, rid = zip(*rows, strict=True)
    ix = np.asarray(prompt_ix)
    df = pd.DataFrame({"arrival_s": np.asarray(arrival), "prompt_tokens": plen[ix],
                       "output_tokens": np.full(len(ix), sp["output_len"], dtype=np.int64),
                       "request_id": list(rid), "hash_ids": [ids[i] for i in ix], "tokens_per_hash": np.int64(tph)})
    notes = [f"inference-perf {kind} load: " + ", ".join(f"{r:g} req/s x {d:g} s" for r, d in stages)
             + f" ({len(df):,} requests, seed {s}); stages {interval:g} s apart after the last send (a lower bound)",
             f"shared_prefix: {sp['num_groups']} system prompts of {sp['system_prompt_len']} tokens x {sp['per_group']} "
             f"questions of {sp['question_len']}, output {sp['output_len']}; request j sends prompt j mod {n_prompts}"]
    ignored = [k for k in raw if k not in SECTIONS]
    if ignored:
        notes.append(f"ignored (no effect on the simulation): {', '.join(map(str, ignored))}")
    return df, notes
