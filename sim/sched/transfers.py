"""The scheduler's side of a KV connector (:mod:`sim.kv.connector`): prefix probes that continue
into external KV, requests waiting for an asynchronous load, and frees a connector delays.

Followed: vLLM 0.33 ``v1/core/sched/scheduler.py`` (``WAITING_FOR_REMOTE_KVS``,
``_update_waiting_for_remote_kv``, ``_update_from_kv_xfer_finished``, ``_connector_finished``)::

    admission, load_async    blocks for hit + load taken (not published); status
                             WAITING_FOR_REMOTE_KVS; the request stays in the waiting queue,
                             passed over (and put back in its place) while the load runs
    get_finished() -> recv   at its next turn its blocks are published, status WAITING /
                             PREEMPTED again, and it is admitted as computed up to the load
    request_finished: delay  its blocks stay held until get_finished() -> sent frees them
"""

from __future__ import annotations

from typing import Any

from sim.kv.base import KvAllocator
from sim.kv.connector import KvConnector, PrefixHit, prefix_hit
from sim.request import Request, Status

REMOTE = Status.WAITING_FOR_REMOTE_KVS


def probe(kv: KvAllocator, connector: KvConnector | None, r: Request) -> PrefixHit:
    """The prefix hit of a waiting request: its local blocks, continued by the connector.

    A request back from an asynchronous load has its first ``num_computed_tokens`` already:
    no probe (vLLM probes only requests with nothing computed).
    """
    if r.num_computed_tokens:
        return prefix_hit(([], r.num_computed_tokens, 0, False))
    blocks = kv.get_computed_blocks(r)
    local = len(blocks) * kv.block_size
    if connector is None:
        return prefix_hit((blocks, local, 0, False))
    ext, load_async = connector.get_num_new_matched_tokens(r, local)
    return prefix_hit((blocks, local + ext, ext, load_async and ext > 0))


class Transfers:
    """Requests a connector holds between steps (none without an asynchronous connector)."""

    __slots__ = ("_loading", "kv", "params", "polled", "received", "sending")

    def __init__(self, kv: KvAllocator) -> None:
        self.kv = kv
        self.received: set[int] = set()          # uids whose asynchronous load has arrived
        self.sending: dict[int, Request] = {}    # finished requests whose blocks the connector holds
        self.params: dict[int, dict[str, Any]] = {}  # uid -> kv_transfer_params from request_finished
        self._loading = 0
        self.polled = False  # a lockstep window polled for the step the exact loop plans next

    @property
    def connector(self) -> KvConnector | None:
        """The allocator's connector (read each time: one may be connected after construction)."""
        return self.kv.connector

    def poll(self, now: float) -> None:
        """Once per scheduled step (when the allocator has a connector): free what was sent, note
        what was received."""
        c = self.kv.connector
        if c is None or not c.asynchronous:
            return
        if self.polled:  # by a window that then handed the step back (sim/engine/fastforward/lockstep.py)
            self.polled = False
            return
        sent, recv = c.get_finished(now)
        for uid in sent:
            r = self.sending.pop(uid, None)
            if r is not None:
                self.kv.free(r)
        self.received |= recv

    @property
    def pending(self) -> int:
        """Requests waiting for an asynchronous load that has not arrived (or not been seen)."""
        return self._loading

    def ready(self, r: Request) -> bool:
        """``r`` waits for a load: True (and ``r`` is a waiting request again) once it arrived."""
        if r.uid not in self.received:
            return False
        self.received.discard(r.uid)
        self._loading -= 1
        r.status = Status.PREEMPTED if r.num_preemptions else Status.WAITING
        if self.kv.enable_caching:
            self.kv.register_full_blocks(r, r.num_computed_tokens)  # delayed caching (vLLM)
        return True

    def allocated(self, r: Request, hit: PrefixHit) -> None:
        """The admission's allocation succeeded: tell the connector."""
        c = self.connector
        if c is not None:
            c.update_state_after_alloc(r, self.kv.num_held_blocks(r), hit.external_tokens)
            if hit.load_async:
                self._loading += 1

    def finished(self, r: Request) -> None:
        """``r`` finished: free its blocks now, or when the connector has sent them."""
        c = self.connector
        if c is not None:
            delay, params = c.request_finished(r, self.kv.num_held_blocks(r))
            if params is not None:
                self.params[r.uid] = params
            if delay:
                self.sending[r.uid] = r
                return
        self.kv.free(r)

    def holders(self, running: list[Request], waiting: Any) -> list[Request]:
        """Every request holding KV blocks: running, waiting for a load or back from one (its
        blocks held while the queue waits), being sent."""
        kv = self.kv
        return [*running, *(r for r in waiting if r.status is REMOTE or (r.num_computed_tokens and kv.num_held_blocks(r))),
                *self.sending.values()]
