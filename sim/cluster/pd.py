"""Disaggregated prefill/decode as KV connectors (:mod:`sim.kv.connector`), after vLLM's NIXL
connector (``vllm/distributed/kv_transfer/kv_connector/v1/nixl/``):

- **prefill side** (:class:`PrefillSender`, ``do_remote_decode``): the request runs cut to its
  prompt and one output token; when it finishes, ``request_finished`` delays the free -- its
  blocks stay held until the decode side has pulled them -- and the cluster hands the request
  to its decode instance;
- **decode side** (:class:`DecodeReceiver`, ``do_remote_prefill``): at admission
  ``get_num_new_matched_tokens`` offers the prompt past the local prefix hit, less its last
  token (vLLM recomputes it), *asynchronously*; the scheduler allocates the blocks and the
  request waits holding them (``WAITING_FOR_REMOTE_KVS``); ``update_state_after_alloc`` starts
  the pull over the link (:mod:`sim.cluster.links`) for the blocks past the local hit; when
  the last byte lands the request is admitted computed up to there and its first decode step
  computes the last prompt token and samples the first output token.

Per request the receiver records when it reached the decode instance, when its blocks were
allocated (the pull starts), and when the KV landed: ``kv_wait_s = landed - reached`` (time
waiting for blocks to receive into, plus the transfer), ``transfer_s = landed - allocated``.
Blocks held while receiving are a memory category of their own (``receiving`` timeline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim.cluster.links import Link
from sim.kv.connector import ConnectorStats
from sim.request import Request

if TYPE_CHECKING:
    from sim.engine.replica import Replica


@dataclass(slots=True)
class PullRecord:
    uid: int
    prefill: int                    # prefill instance index
    decode: int                     # decode instance index
    reached_s: float = -1.0         # handed to the decode instance
    start_s: float = -1.0           # blocks allocated: the pull starts
    landed_s: float = -1.0          # last byte arrived
    blocks: int = 0                 # blocks moved
    nbytes: float = 0.0
    blocked: bool = False           # waited for free decode blocks (not allocated at its first pass)


class PrefillSender:
    """Prefill-side connector: delayed frees until the decode side has the blocks."""

    asynchronous = True

    def __init__(self, on_prefilled: Callable[[Request], None]) -> None:
        self.rep: Replica | None = None  # set once the instance is built
        self.on_prefilled = on_prefilled
        self._sent: set[int] = set()

    def get_num_new_matched_tokens(self, req: Request, num_computed_tokens: int) -> tuple[int, bool]:
        return 0, False

    def update_state_after_alloc(self, req: Request, blocks: int, num_external_tokens: int) -> None:
        return None

    def save_blocks(self, req: Request, start: int, stop: int) -> None:
        return None

    def request_finished(self, req: Request, blocks: int) -> tuple[bool, dict[str, Any] | None]:
        self.on_prefilled(req)
        return True, {"do_remote_decode": True}

    def sent(self, uid: int) -> None:
        """The decode side has pulled ``uid``'s blocks: free them at the next poll."""
        self._sent.add(uid)
        if self.rep is not None:
            self.rep.wake()

    def get_finished(self, now: float) -> tuple[set[int], set[int]]:
        sent, self._sent = self._sent, set()
        return sent, set()

    def next_finished_s(self) -> float | None:
        return None  # unknown here: the decode side's pull wakes this instance (Replica.wake)

    def stats(self) -> ConnectorStats:
        return ConnectorStats()

    def check(self) -> None:
        return None


@dataclass(slots=True, eq=False)
class _Expected:
    record: PullRecord
    sender: PrefillSender
    link: Link
    local: int = 0                  # local prefix-hit tokens at the probe


@dataclass(eq=False)
class DecodeReceiver:
    """Decode-side connector: asynchronous loads over a link (see the module docstring)."""

    bytes_per_block: float           # KV bytes of one block over all decode ranks
    block_size: int
    rep: Any = None                  # the decode Replica, set once the instance is built
    expected: dict[int, _Expected] = field(default_factory=dict)
    records: list[PullRecord] = field(default_factory=list)
    receiving: list[tuple[float, int]] = field(default_factory=list)  # (time, blocks held receiving)
    blocked: int = 0                 # requests that waited for free blocks to receive into
    asynchronous: bool = True
    _held: int = 0
    _landed: set[int] = field(default_factory=set)
    _seen: set[int] = field(default_factory=set)

    def expect(self, req: Request, record: PullRecord, sender: PrefillSender, link: Link) -> None:
        """``req``'s prompt KV is on ``sender``'s instance; it reaches us now."""
        record.reached_s = self.rep.env.now
        self.expected[req.uid] = _Expected(record, sender, link)
        self.records.append(record)

    def get_num_new_matched_tokens(self, req: Request, num_computed_tokens: int) -> tuple[int, bool]:
        e = self.expected.get(req.uid)
        if e is None:
            return 0, False
        e.local = num_computed_tokens
        return max(req.num_tokens - 1 - num_computed_tokens, 0), True

    def update_state_after_alloc(self, req: Request, blocks: int, num_external_tokens: int) -> None:
        e = self.expected.pop(req.uid, None)
        if e is None:
            return
        env, rec = self.rep.env, e.record
        rec.start_s = env.now
        self._seen.discard(req.uid)
        if num_external_tokens <= 0:  # all of it cached here already: nothing to pull
            rec.landed_s = env.now
            e.sender.sent(req.uid)
            return
        rec.blocks = blocks - e.local // self.block_size
        rec.nbytes = rec.blocks * self.bytes_per_block
        self._hold(blocks)

        def landed(t: float) -> None:
            rec.landed_s = t
            self._hold(-blocks)
            self._landed.add(req.uid)
            e.sender.sent(req.uid)
            self.rep.wake()

        e.link.transfer(rec.nbytes, landed)

    def _hold(self, n: int) -> None:
        self._held += n
        self.receiving.append((self.rep.env.now, self._held))

    def save_blocks(self, req: Request, start: int, stop: int) -> None:
        return None

    def request_finished(self, req: Request, blocks: int) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    def get_finished(self, now: float) -> tuple[set[int], set[int]]:
        """Once per scheduling pass: what landed; and a request still not allocated at its second
        pass after reaching us is *blocked* (the decode pool had no room to receive it)."""
        for uid, e in self.expected.items():
            if uid in self._seen:
                if not e.record.blocked:
                    e.record.blocked = True
                    self.blocked += 1
            else:
                self._seen.add(uid)
        recv, self._landed = self._landed, set()
        return set(), recv

    def next_finished_s(self) -> float | None:
        return None  # a shared link's completions move as transfers join: the landing wakes us

    def stats(self) -> ConnectorStats:
        return ConnectorStats()

    def check(self) -> None:
        assert self._held >= 0, "negative receiving blocks"
