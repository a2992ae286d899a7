"""Live request state (mutable, slotted) and its lifecycle."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

Content = tuple[Any, ...]  # ("ids", token ids) | ("hash", hash ids, tokens_per_hash) | ("shared", key)


class Status(IntEnum):
    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    SWAPPED = 3
    FINISHED = 4
    REJECTED = 5
    WAITING_FOR_REMOTE_KVS = 6  # holds blocks an asynchronous KV load fills (sim/kv/connector.py)


@dataclass(slots=True, eq=False)
class Request:
    """One sequence in the engine. ``num_tokens = prompt + generated``.

    Block-hash content: full blocks that lie inside the prompt take their content key from
    ``content`` (token ids, Mooncake hash ids, or a shared prompt id for fanned-out samples);
    every other block is unique to the request.
    """

    uid: int                       # dense index, 0..N-1 (row in the output)
    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int             # output length: the trace's, cut at max_model_len (length_capped)
    priority: int = 0
    content: Content | None = None  # None: no content (keys unique to the request)
    parent: int = -1               # uid of the parent request for fanned-out samples
    group: list[Request] | None = None  # paper-v0 fork mode: the sequence group, leader first
    beam: bool = False             # the group is a beam search (members re-fork every step)
    num_tokens: int = 0            # prompt + generated so far (kept in step with num_output)
    status: Status = Status.WAITING
    seq: int = -1                  # position key in the running list (set when appended)
    num_computed_tokens: int = 0
    num_output: int = 0
    pending_output: int = 0        # async scheduling: sampled by the step in flight, counted in
                                   # num_tokens but not yet seen by the scheduler (sim/sched/async_scheduler.py)
    length_capped: bool = False    # output cut at max_model_len (vLLM finish reason "length")
    kv: Any = None                 # the allocator's handle (sim/kv: BlockTable | Chunk)
    # records
    first_scheduled_s: float = -1.0
    first_scheduled_step: int = -1
    first_token_s: float = -1.0
    finish_s: float = -1.0
    finish_step: int = -1
    num_preemptions: int = 0
    prefix_hit_tokens: int = -1    # hit at first admission
    reject_reason: str = ""        # a code of sim.io.rejects.CODES ("" while not rejected)
    reject_detail: str = ""        # the reason with its numbers

    def __post_init__(self) -> None:
        self.num_tokens = self.prompt_tokens + self.num_output

    def advance(self, n: int, end: float) -> bool:
        """``n`` more tokens computed in a step ending at ``end``; True if a token was sampled.

        A token is sampled only when the whole sequence is computed (a partial prefill chunk
        samples nothing); the first one sets ``first_token_s``.
        """
        self.num_computed_tokens += n
        if self.num_computed_tokens != self.num_tokens:
            return False
        self.num_output += 1
        self.num_tokens += 1
        if self.first_token_s < 0:
            self.first_token_s = end
        return True

    def cap_output(self, max_model_len: int) -> None:
        """Stop at ``max_model_len`` tokens, as vLLM's ``check_stop`` does (finish reason
        "length"): a prompt shorter than the limit gets ``max_model_len - prompt`` output tokens."""
        if self.prompt_tokens + self.output_tokens > max_model_len:
            self.output_tokens = max_model_len - self.prompt_tokens
            self.length_capped = True

    @property
    def final_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens
