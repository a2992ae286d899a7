"""Why a request was rejected: a category code (the ``reject_reason`` column, a pandas
category) and a human-readable detail with the numbers (the ``reject_detail`` column).

======================== ==============================================================
code                     the request ...
======================== ==============================================================
``max_model_len``        has a prompt of ``max_model_len`` tokens or more (vLLM rejects it; longer
                         outputs are cut at the limit instead, ``finish_reason`` = length)
``max_num_batched_tokens`` has a prompt longer than one step's token budget, without chunked prefill
``kv_pool``              can never be placed in the KV pool, even when it is empty
======================== ==============================================================
"""

from __future__ import annotations

from typing import NamedTuple

MAX_MODEL_LEN = "max_model_len"
BATCH_TOKENS = "max_num_batched_tokens"
KV_POOL = "kv_pool"
CODES = (MAX_MODEL_LEN, BATCH_TOKENS, KV_POOL)


class Rejection(NamedTuple):
    code: str       # one of CODES
    detail: str     # e.g. "prompt+output 5010 > max_model_len 4096"
