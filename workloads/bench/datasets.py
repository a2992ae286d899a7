"""vLLM's benchmark datasets (``vllm bench serve --dataset-name``) as kvsim trace frames.

Same sampling rules as vLLM's ``vllm/benchmarks/datasets`` (``random``, ``prefix_repetition``,
``sharegpt``), with one seeded Generator per dataset; kvsim has no tokenizer, so lengths are the
token counts vLLM targets (special tokens counted as 0: a server that adds BOS to a random
prompt of ``input_len - 1`` sampled tokens sees ``input_len``). Prompt content is expressed as
shared-prefix hash ids (:mod:`workloads.bench.prefix_ids`) so prefix caching sees exactly the
sharing vLLM's prompts have. Every frame has ``arrival_s = 0``; arrivals come from
:mod:`workloads.request_rate`. Each builder returns ``(frame, notes)``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import ConfigError
from workloads.bench.prefix_ids import head_hash_ids
from workloads.bench.spec import IslOslSet, PrefixRepetitionSet, RandomSet, ShareGPTSet

#: vLLM's ``is_valid_sequence`` defaults (benchmark_serving.py's ShareGPT pruning)
SHAREGPT_MIN_LEN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048
SHAREGPT_TABLE = Path("traces") / "sarathi_length_stats" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"

Built = tuple[pd.DataFrame, list[str]]


def _frame(prompt: np.ndarray, output: np.ndarray, groups: np.ndarray | None = None, head_len: int = 0) -> pd.DataFrame:
    df = pd.DataFrame({"arrival_s": np.zeros(len(prompt)), "prompt_tokens": prompt.astype(np.int64),
                       "output_tokens": output.astype(np.int64)})
    if groups is not None and head_len > 0:
        df["hash_ids"], tph = head_hash_ids(groups, head_len, df["prompt_tokens"].to_numpy())
        df["tokens_per_hash"] = np.int64(tph)
    df["request_id"] = [str(i) for i in range(len(df))]
    return df


def length_window(length: int, ratio: float, legacy: bool = False) -> tuple[int, int]:
    """vLLM's sampling window of one length: [floor(L(1-r)), ceil(L(1+r))], or legacy
    benchmark_serving.py's [int(L r), L]."""
    if legacy:
        return max(1, int(length * ratio)), length
    return math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))


def random_lengths(n: int, input_len: int, output_len: int, ratio: float, prefix_len: int,
                   rng: np.random.Generator, legacy: bool = False) -> Built:
    """vLLM's RandomDataset lengths: prompt = prefix_len + U[window of input_len], output U[window
    of output_len] (at least 1), integers, the prefix shared by every prompt."""
    lo, hi = length_window(input_len, ratio, legacy)
    if prefix_len + lo < 1:
        raise ConfigError(f"random dataset: input_len {input_len} with range_ratio {ratio} can give prompts "
                          "of 0 tokens; raise input_len or prefix_len, or lower range_ratio")
    olo, ohi = length_window(output_len, ratio, legacy)
    olo, ohi = max(olo, 1), max(ohi, 1)
    inp = rng.integers(lo, hi + 1, size=n)
    out = rng.integers(olo, ohi + 1, size=n)
    notes = [f"random dataset: {n:,} prompts, input {lo}..{hi} + a shared prefix of {prefix_len}, "
             f"output {olo}..{ohi} tokens (seeded)"]
    return _frame(prefix_len + inp, out, np.zeros(n, dtype=np.int64), prefix_len), notes


def random_set(s: RandomSet, rng: np.random.Generator) -> Built:
    """vLLM's RandomDataset (:class:`~workloads.bench.spec.RandomSet`)."""
    return random_lengths(s.num_prompts, s.input_len, s.output_len, s.range_ratio, s.prefix_len, rng)


def prefix_repetition_set(s: PrefixRepetitionSet, rng: np.random.Generator) -> Built:
    """vLLM's PrefixRepetitionRandomDataset: num_prompts // num_prefixes prompts per prefix
    (vLLM makes no more: the rest of num_prompts is dropped), shuffled unless ``shuffle: false``."""
    per = s.num_prompts // s.num_prefixes
    groups = np.repeat(np.arange(s.num_prefixes, dtype=np.int64), per)
    if s.shuffle:
        groups = groups[rng.permutation(len(groups))]
    n = len(groups)
    notes = [f"prefix_repetition dataset: {s.num_prefixes} prefixes of {s.prefix_len} tokens x {per} prompts "
             f"(+ {s.suffix_len} own tokens each), output {s.output_len}"]
    if n < s.num_prompts:
        notes.append(f"{s.num_prompts - n} of num_prompts {s.num_prompts} dropped: "
                     f"{s.num_prefixes} prefixes divide it into {per} each (as vLLM)")
    prompt = np.full(n, s.prefix_len + s.suffix_len, dtype=np.int64)
    return _frame(prompt, np.full(n, s.output_len, dtype=np.int64), groups, s.prefix_len), notes


def sharegpt_path(s: ShareGPTSet) -> Path:
    if s.path:
        return Path(s.path)
    data = os.environ.get("KVSIM_DATA")
    if data and (Path(data) / SHAREGPT_TABLE).is_file():
        return Path(data) / SHAREGPT_TABLE
    raise ConfigError("sharegpt dataset: give the length table (path: / --dataset-path), e.g. "
                      f"$KVSIM_DATA/{SHAREGPT_TABLE} (KVSIM_DATA is unset or lacks it); kvsim has no tokenizer "
                      "to read ShareGPT's JSON conversations")


def sharegpt_set(s: ShareGPTSet, rng: np.random.Generator) -> Built:
    """Rows of a length table in a seeded shuffle, kept by vLLM's filter (prompt >= 4 and <= 1,024,
    output >= 4 unless ``output_len`` replaces it, prompt + output <= 2,048), the first
    num_prompts; too few: drawn again with replacement (vLLM's oversampling)."""
    from workloads.loader import load_trace

    path = sharegpt_path(s)
    try:
        tab = load_trace(path).df
    except ConfigError:
        raise
    except Exception as e:  # a JSON conversation file, a binary: say what kvsim reads instead
        raise ConfigError(f"{path}: not a length table kvsim reads ({type(e).__name__}); sharegpt needs "
                          "prompt/output token counts (e.g. the Sarathi-Serve ShareGPT stats CSV)") from None
    p = tab["prompt_tokens"].to_numpy(np.int64)
    o = np.full(len(p), s.output_len, np.int64) if s.output_len else tab["output_tokens"].to_numpy(np.int64)
    ok = (p >= SHAREGPT_MIN_LEN) & (p <= SHAREGPT_MAX_PROMPT) & (p + o <= SHAREGPT_MAX_TOTAL)
    if s.output_len is None:
        ok &= o >= SHAREGPT_MIN_LEN
    order = rng.permutation(len(p))
    keep = order[ok[order]][: s.num_prompts]
    if len(keep) == 0:
        raise ConfigError(f"{path}: no row passes vLLM's sharegpt filter (prompt 4..1024, total <= 2048)")
    notes = [f"sharegpt dataset: {min(len(keep), s.num_prompts):,} rows of {path.name} ({int(ok.sum()):,} of "
             f"{len(p):,} pass vLLM's filter), seeded shuffle"]
    if len(keep) < s.num_prompts:
        extra = rng.choice(keep, size=s.num_prompts - len(keep), replace=True)
        notes.append(f"oversampled {len(extra):,} rows with replacement to reach num_prompts (as vLLM)")
        keep = np.concatenate([keep, extra])
    return _frame(p[keep], o[keep]), notes


def isl_osl_sets(s: IslOslSet, seed: int) -> list[tuple[str, Built]]:
    """One random dataset per ISL/OSL point, labelled ``isl{I}_osl{O}``; each point seeded alike."""
    return [(f"isl{isl}_osl{osl}", random_lengths(s.num_prompts, isl, osl, s.range_ratio, s.prefix_len,
                                                  np.random.default_rng(seed), legacy=s.range == "legacy"))
            for isl, osl in s.pairs()]
