"""Prefix block hash ids for shared system prompts and multi-turn conversations.

Ids follow Mooncake's convention: one id per ``block`` tokens of the prompt, equal ids mean
the same KV content. Only *full* blocks can be shared, so a request inherits::

    system prompt (S tokens):   ids of its floor(S / block) full blocks
    turn k > 0:                 ids of the floor(P_{k-1} / block) full blocks of turn k-1

    turn k-1  |a|b|c|d|e.|              prompt P_{k-1} (e is partial)
    turn k    |a|b|c|d|f|g|h.|          inherits a-d; f.. cover e + answer + new text

and every other block gets a fresh id.
"""

from __future__ import annotations

import numpy as np


def prefix_hash_ids(prompt: np.ndarray, turn: np.ndarray, has_sys: np.ndarray, sys_tokens: int,
                    block: int, keep: np.ndarray) -> list[list[int]]:
    """One id list per request (requests of a conversation are consecutive, turn 0 first)."""
    sys_blocks = sys_tokens // block
    next_id = sys_blocks  # ids 0..sys_blocks-1 are the system prompt
    ids: list[list[int]] = []
    for i in range(len(prompt)):
        need = -(-int(prompt[i]) // block)
        if not keep[i]:
            ids.append([])
            continue
        if turn[i] > 0:
            inherit = ids[i - 1][: int(prompt[i - 1]) // block]
        elif has_sys[i]:
            inherit = list(range(min(sys_blocks, need)))
        else:
            inherit = []
        fresh = need - len(inherit)
        ids.append(inherit + list(range(next_id, next_id + fresh)))
        next_id += fresh
    return ids
