"""Prefix-cache content for synthetic prompts: shared heads as hash ids, everything else unique.

A benchmark prompt is a shared head (a random dataset's prefix, a repeated prefix, an
inference-perf system prompt) followed by tokens no other prompt has. kvsim needs no token ids
to see that: Mooncake-style ``hash_ids`` with ``tokens_per_hash`` = a divisor of the head's
length give every full block inside the head the same content key in every prompt of its group,
and every block that reaches past it a key of its own (:mod:`sim.kv.hashing`). A block that
straddles the end of the head is unique, as in vLLM, where it holds different tokens.
"""

from __future__ import annotations

import math

import numpy as np

MAX_TOKENS_PER_HASH = 4096


def tokens_per_hash(head_len: int) -> int:
    """The largest power of two (<= 4,096) that divides ``head_len``: one id never spans the
    head's end, and ids stay few for round lengths (1,000 tokens: 8 per id)."""
    return math.gcd(head_len, MAX_TOKENS_PER_HASH) if head_len > 0 else MAX_TOKENS_PER_HASH


def head_hash_ids(groups: np.ndarray, head_len: int, prompt_tokens: np.ndarray) -> tuple[list[list[int]], int]:
    """(one id list per prompt, tokens per id): prompt ``i`` opens with the ``head_len`` tokens of
    head ``groups[i]`` (shared with its group), then unique content up to ``prompt_tokens[i]``."""
    tph = tokens_per_hash(head_len)
    per_head = head_len // tph
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    next_id = n_groups * per_head
    out: list[list[int]] = []
    for g, p in zip(groups.tolist(), prompt_tokens.tolist(), strict=True):
        head = list(range(g * per_head, (g + 1) * per_head))
        fresh = max(0, -(-int(p) // tph) - per_head)
        out.append(head + list(range(next_id, next_id + fresh)))
        next_id += fresh
    return out, tph
