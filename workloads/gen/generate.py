"""Build a synthetic trace from a :class:`~workloads.gen.spec.Spec`.

Order of work (and of random draws, so a seed fixes the output):

1. conversation start times from the arrival process;
2. turns per conversation (1 unless multi-turn) and their think-time gaps;
3. (new-text, output) length pairs for every turn, through the copula;
4. prompts: system prompt + history (previous prompt and answer) + new text, clipped to
   ``max_model_len`` (a conversation ends at the turn that would not fit);
5. prefix ``hash_ids`` per ``block_size`` tokens, when sharing is configured;
6. ``n`` and ``beam_width``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, ValidationError

from sim.errors import ConfigError
from sim.safe_yaml import safe_load
from workloads.gen import lengths as L
from workloads.gen.arrivals import arrivals
from workloads.gen.sharing import prefix_hash_ids
from workloads.gen.spec import Spec

M = TypeVar("M", bound=BaseModel)


def read_spec_yaml(path: str | Path) -> object:
    """The YAML document of a spec file (any kind ``kvsim trace gen`` reads); one-line errors."""
    p = Path(path)
    try:
        return safe_load(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the spec ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        raise ConfigError(f"{where}: invalid YAML ({getattr(e, 'problem', e)})") from None


def load_spec(path: str | Path) -> Spec:
    """Parse and validate a YAML spec; errors are one line naming the key."""
    return parse_spec(read_spec_yaml(path), str(path))


def parse_spec(raw: object, where: str = "spec") -> Spec:
    return validated(Spec, raw, where)


def validated(model: type[M], raw: object, where: str) -> M:
    """``raw`` validated as ``model``; a bad spec is one line naming each key at fault."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        msgs = [f"{'.'.join(str(x) for x in err['loc']) or '<root>'}: {err['msg']}" for err in e.errors()]
        raise ConfigError(f"{where}: " + "; ".join(msgs)) from None


def _turns(rng: np.random.Generator, spec: Spec, n_conv: int) -> tuple[np.ndarray, float]:
    mt = spec.sharing.multi_turn if spec.sharing else None
    if mt is None:
        return np.ones(n_conv, dtype=np.int64), 0.0
    multi = rng.random(n_conv) < mt.fraction
    k = L.quantile(mt.turns, rng.random(n_conv), "turns")
    return np.where(multi, k, 1).astype(np.int64), mt.think_time_s


def generate(spec: Spec, rng: np.random.Generator) -> pd.DataFrame:
    """A normalized trace frame (sorted by arrival) drawn from ``spec`` with ``rng``."""
    starts, clients = arrivals(rng, spec.arrivals, spec.num_requests, spec.duration_s)
    n_conv = len(starts)
    turns, think = _turns(rng, spec, n_conv)
    conv = np.repeat(np.arange(n_conv), turns)
    turn = np.arange(len(conv)) - np.repeat(np.cumsum(turns) - turns, turns)
    gaps = np.where(turn > 0, rng.exponential(think, len(conv)) if think else 0.0, 0.0)
    # arrival = conversation start + cumulative think gaps within the conversation
    csum = np.cumsum(gaps)
    t = starts[conv] + csum - np.repeat(csum[np.cumsum(turns) - turns], turns)
    u_new, u_out = L.correlated_uniforms(rng, len(conv), spec.correlation)
    new_text = L.quantile(spec.prompt, u_new, "prompt_tokens")
    out = L.quantile(spec.output, u_out, "output_tokens")
    sp = spec.sharing.system_prompt if spec.sharing else None
    has_sys = rng.random(n_conv) < sp.fraction if sp else np.zeros(n_conv, bool)
    sys_tokens = np.where(has_sys, sp.tokens if sp else 0, 0)[conv]
    prompt, out, keep = _history(new_text, out, sys_tokens, turn, spec.max_model_len)
    df = pd.DataFrame({"arrival_s": t, "prompt_tokens": prompt, "output_tokens": out})
    if spec.sharing is not None:
        df["hash_ids"] = prefix_hash_ids(prompt, turn, has_sys[conv], sp.tokens if sp else 0,
                                         spec.sharing.block_size, keep)
        df["tokens_per_hash"] = np.int64(spec.sharing.block_size)
    if spec.sharing is not None and spec.sharing.multi_turn is not None:
        df["session_id"], df["turn"] = conv, turn
    if clients is not None:
        df["client_id"] = clients[conv]
    for col in ("n", "beam_width"):
        c = getattr(spec, col)
        if not isinstance(c, int) or c != 1:
            df[col] = L.choice(rng, c, len(df))
    df = df[keep]
    df = df.iloc[np.argsort(df["arrival_s"].to_numpy(), kind="stable")]
    if spec.duration_s is not None:
        df = df[df["arrival_s"].to_numpy() < spec.duration_s]
    if spec.num_requests is not None:
        df = df.iloc[: spec.num_requests]
    df = df.reset_index(drop=True)
    df.insert(3, "request_id", [str(i) for i in range(len(df))])
    return df


def _history(new_text: np.ndarray, out: np.ndarray, sys_tokens: np.ndarray, turn: np.ndarray,
             max_len: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prompt of each turn = previous prompt + previous answer + new text (first: system + new).

    Returns prompts, clipped outputs and a keep mask (False from the first turn that does not
    fit ``max_len`` to the end of its conversation).
    """
    n = len(new_text)
    prompt = np.empty(n, dtype=np.int64)
    out = out.copy()
    keep = np.ones(n, bool)
    cap = max_len if max_len is not None else np.iinfo(np.int64).max
    for i in range(n):
        if turn[i] == 0:
            p = int(sys_tokens[i] + new_text[i])
            if p > cap - 1:
                p = cap - 1
        else:
            p = int(prompt[i - 1] + out[i - 1] + new_text[i])
            if not keep[i - 1] or p > cap - 1:
                keep[i] = False
        prompt[i] = p
        out[i] = max(1, min(int(out[i]), cap - p))
    return prompt, out, keep
