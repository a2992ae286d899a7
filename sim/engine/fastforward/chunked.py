"""A chunked prefill inside a fast-forward window.

With ``max_num_batched_tokens`` below the prompt lengths (vLLM's server default is 2048 on
large GPUs) a prompt is prefilled over several steps while the others decode. The window
carries one such request (``part``) along with real counts: each step the scheduler's running
pass gives it its next chunk after every decoder has its token, then admission runs on what
is left::

    running   [ d d d d ... d  part ]        (part admitted last: after every decoder)
    budget     1 1 1 1 ... 1  chunk = chunk_tokens(remaining, max_batched - decoders)

That is what ``Scheduler.schedule`` does, in the same order (decoders' blocks, then the
chunk's, then admissions), only when nothing scheduled follows ``part`` in running (a decoder
after it would take its block, and its token, after the chunk) and the chunk's blocks are
free without preempting. Otherwise the window ends before the step and the exact loop runs it.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.request import Request
from sim.sched.scheduler import Scheduler


def carried(running: list[Request], decoding: Callable[[Request], bool]) -> tuple[bool, Request | None]:
    """Whether a window can start on ``running`` -- decoders and at most one chunked prefill
    (no token in flight) -- and that prefill."""
    part = None
    for r in running:
        if not decoding(r):
            if part is not None or r.num_tokens - r.num_computed_tokens < 2 or r.pending_output:
                return False, None
            part = r
    return True, part


def next_chunk(sched: Scheduler, part: Request, unscheduled: list[Request], decoders: int,
               max_batched: int, reserve: int) -> int:
    """Tokens of ``part``'s next chunk this step, or 0: the window cannot apply the step
    (``unscheduled``: running requests the pass skips, an async last token in flight;
    ``reserve``: blocks the decoders take first)."""
    running = sched.running
    i = running.index(part)
    for r in running[i + 1:]:
        if r not in unscheduled:
            return 0
    n = sched.chunk_tokens(part.num_tokens - part.num_computed_tokens, max_batched - decoders)
    if n <= 0 or sched.kv.can_allocate(part, n, reserve=reserve) < 0:
        return 0
    return n
