"""Live request state (mutable) and its lifecycle.

Compiled by Cython where a C compiler is (``request.pxd``: an extension type whose fields the
compiled loops that name it read and write as struct members, not by an attribute lookup), else
run as is. Either way a field holds the object assigned to it, as a
slotted class's would. A subclass may add methods and attributes; one that redefined a field
(a property of the same name) would not be seen by the compiled loops, which read the field.
"""

from __future__ import annotations

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


#: every field, in the constructor's order (positional as a dataclass's would be)
FIELDS = (
    "uid", "request_id", "arrival_s", "prompt_tokens", "output_tokens", "priority", "content", "parent",
    "group", "beam", "num_tokens", "status", "seq", "num_computed_tokens", "num_output", "pending_output",
    "length_capped", "kv", "first_scheduled_s", "first_scheduled_step", "first_token_s", "finish_s",
    "finish_step", "num_preemptions", "prefix_hit_tokens", "reject_reason", "reject_detail",
)


class Request:
    """One sequence in the engine. ``num_tokens = prompt + generated`` (set from them: a
    ``num_tokens`` given is ignored, as the dataclass this was did in ``__post_init__``).

    Block-hash content: full blocks that lie inside the prompt take their content key from
    ``content`` (token ids, Mooncake hash ids, or a shared prompt id for fanned-out samples);
    every other block is unique to the request.
    """

    def __init__(self, uid: int, request_id: str, arrival_s: float, prompt_tokens: int, output_tokens: int,
                 priority: int = 0, content: Content | None = None, parent: int = -1,
                 group: list[Request] | None = None, beam: bool = False, num_tokens: int = 0,
                 status: Status = Status.WAITING, seq: int = -1, num_computed_tokens: int = 0,
                 num_output: int = 0, pending_output: int = 0, length_capped: bool = False, kv: Any = None,
                 first_scheduled_s: float = -1.0, first_scheduled_step: int = -1, first_token_s: float = -1.0,
                 finish_s: float = -1.0, finish_step: int = -1, num_preemptions: int = 0,
                 prefix_hit_tokens: int = -1, reject_reason: str = "", reject_detail: str = "") -> None:
        self.uid: int = uid                      # dense index, 0..N-1 (row in the output)
        self.request_id: str = request_id
        self.arrival_s: float = arrival_s
        self.prompt_tokens: int = prompt_tokens
        self.output_tokens: int = output_tokens  # the trace's, cut at max_model_len (length_capped)
        self.priority: int = priority
        self.content: Content | None = content   # None: no content (keys unique to the request)
        self.parent: int = parent                # uid of the parent request for fanned-out samples
        self.group: list[Request] | None = group  # paper-v0 fork mode: the sequence group, leader first
        self.beam: bool = beam                   # the group is a beam search (members re-fork every step)
        self.num_tokens: int = prompt_tokens + num_output  # prompt + generated so far
        self.status: Status = status
        self.seq: int = seq                      # position key in the running list (set when appended)
        self.num_computed_tokens: int = num_computed_tokens
        self.num_output: int = num_output
        # async scheduling: sampled by the step in flight, counted in num_tokens but not yet seen
        # by the scheduler (sim/sched/async_scheduler.py)
        self.pending_output: int = pending_output
        self.length_capped: bool = length_capped  # output cut at max_model_len (finish reason "length")
        self.kv: Any = kv                        # the allocator's handle (sim/kv: BlockTable | Chunk)
        # records
        self.first_scheduled_s: float = first_scheduled_s
        self.first_scheduled_step: int = first_scheduled_step
        self.first_token_s: float = first_token_s
        self.finish_s: float = finish_s
        self.finish_step: int = finish_step
        self.num_preemptions: int = num_preemptions
        self.prefix_hit_tokens: int = prefix_hit_tokens  # hit at first admission
        self.reject_reason: str = reject_reason  # a code of sim.io.rejects.CODES ("" while not rejected)
        self.reject_detail: str = reject_detail  # the reason with its numbers

    def __repr__(self) -> str:
        return "Request(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in FIELDS) + ")"

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
