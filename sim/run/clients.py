"""Closed-loop clients: requests sent when earlier ones finish, not at fixed times.

Two kinds, as the load tools users run make them:

- ``--max-concurrency N`` (``vllm bench serve``): requests in trace order, at most N in flight
  from send to last token; request ``i`` is sent at ``max(arrival_i, the slot's release)``, the
  slot being the one the ``(i - N)``-th release (in time order) frees. With ``--request-rate``
  the trace's times are the rate's, so a request waits for both, as in vLLM.
- **Sessions** (trace columns ``session_id``, ``turn``, ``think_time_s``): a session's first
  turn is sent at its ``arrival_s``; turn ``k`` is sent ``think_time_s`` (its row's) after turn
  ``k - 1``'s last token. Its prompt repeats the earlier turns' prompts and outputs, so the
  earlier turn is given token-id content that runs on past its prompt into its output: its
  decoded blocks get the content keys the next prompt's blocks have (:mod:`sim.kv.hashing`),
  and the next turn's hits follow from the hashes alone.

Both are a finish hook (``StepKernel.on_done``), called in the replica's own step as a request
finishes or is rejected: a request's send time is known then, so it goes into the replica's
inbox at once (:meth:`~sim.engine.replica.Replica.submit_sent`), as a trace replay's are. A
fast-forward window lands finishes in the same order and at the same times as exact steps and
re-reads the inbox's next arrival after each one, so results are bit-identical to
``--exact-steps`` (tested). A request's ``arrival_s`` is its send time. Behind a fleet's router
the hook is every instance's, and a send goes to the router at its time
(:mod:`sim.cluster.sends`).

Behind one replica's API server (the default ``--api-server-count 1``), ``--max-concurrency``
frees a slot when the last chunk reaches the client: the server is solved as the run goes
(:mod:`sim.frontend.live`) and the replica steps exactly; a session's next turn likewise goes
its think time after the last chunk reaches the client. Not modelled yet (refused): both kinds
at once (a slot would go to a turn not yet ready, so the choice needs times not known at the
finish); fanned-out samples (``n > 1``); and, behind an API server, several servers and fleets
(:func:`refuse` says why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.engine.replica import Replica
from sim.errors import ConfigError
from sim.frontend.live import LiveFrontEnd
from sim.frontend.stage import FrontEnd
from sim.request import Request
from workloads.schema import Trace, has_sessions


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """How the requests are sent: ``max_concurrency`` None is open loop (the trace's times)."""

    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        n = self.max_concurrency
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
            raise ConfigError(f"--max-concurrency {n!r}: must be a whole number >= 1")


class ClosedLoop:
    """Sends ``reqs`` (uid order) as ``spec`` and the trace's sessions say; :meth:`feed` a replica."""

    def __init__(self, reqs: Sequence[Request], slots: int | None, follows: np.ndarray, think: np.ndarray,
                 live: LiveFrontEnd | None = None) -> None:
        self.reqs, self.slots = reqs, slots
        self.after = {int(p): i for i, p in enumerate(follows.tolist()) if p >= 0}  # uid -> its session's next turn
        self.think = think
        self.sent = 0
        self.send: Callable[[Request], None] | None = None
        self.live = live  # the API server, solved as the run goes (sim/frontend/live.py)

    def first(self) -> list[Request]:
        """The requests sent at their own times (arrival order)."""
        if self.slots is not None:
            self.sent = min(self.slots, len(self.reqs))
            return list(self.reqs[:self.sent])
        later = set(self.after.values())
        return [r for r in self.reqs if r.uid not in later]

    def feed(self, rep: Replica) -> None:
        """Submit the first requests to ``rep`` and hook its finishes. Behind an API server each
        request goes through it (:mod:`sim.frontend.live`) and the replica steps exactly."""
        live = self.live
        if live is None:
            rep.submit_all(self.first())
            self.hook([rep], rep.submit_sent)
            return
        live.attach(rep.env, rep.submit)
        self.hook([rep], lambda r: live.send(r, r.arrival_s))
        for r in self.first():
            live.send(r, r.arrival_s)
        rep.exact_steps = True
        own = rep.on_step

        def stepped(x: Replica) -> None:  # the caller's hook too, if it gave one
            if own is not None:
                own(x)
            live.step_end(x.env.now)

        rep.on_step = stepped

    def hook(self, reps: Iterable[Replica], send: Callable[[Request], None]) -> None:
        """Hook every replica's finishes; a request is then sent with ``send`` (its time set)."""
        self.send = send
        for rep in reps:
            rep.kernel.on_done = self.done

    def done(self, gone: list[Request], t: float) -> None:
        """``gone`` left the engine at ``t``: send what that frees (a slot, a session's next turn)."""
        send, live = self.send, self.live
        assert send is not None  # (hooked)
        free = live.released(gone, t) if live is not None else [t] * len(gone)  # when the clients have them
        for r, at in zip(gone, free, strict=True):
            if self.slots is not None:
                if self.sent < len(self.reqs):
                    nxt = self.reqs[self.sent]
                    self.sent += 1
                    nxt.arrival_s = max(nxt.arrival_s, at)
                    send(nxt)
                continue
            i = self.after.get(r.uid)
            if i is not None:
                nxt = self.reqs[i]
                nxt.arrival_s = at + float(self.think[i])
                send(nxt)


def sessions_of(trace: Trace) -> tuple[np.ndarray, np.ndarray] | None:
    """(per row: the row of the session's previous turn or -1, the row's think time), or None
    when the trace has no sessions. Rows are uids (``make_requests``: one request a row)."""
    df = trace.df
    if not has_sessions(df):
        return None
    follows = np.full(len(df), -1, np.int64)
    order = np.lexsort((df["turn"].to_numpy(), df["session_id"].astype(str).to_numpy()))
    sid = df["session_id"].astype(str).to_numpy()[order]
    same = np.concatenate(([False], sid[1:] == sid[:-1]))
    follows[order[1:][same[1:]]] = order[:-1][same[1:]]
    return follows, df["think_time_s"].to_numpy(np.float64)


def chain_content(reqs: Sequence[Request], follows: np.ndarray) -> None:
    """Each turn followed by another gets as content the next prompt's ids up to its own prompt
    plus output (module docstring): only where both turns carry token ids and agree on the prompt."""
    for i, p in enumerate(follows.tolist()):
        if p < 0:
            continue
        prev, nxt = reqs[p], reqs[i]
        a, b = prev.content, nxt.content
        if not (isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] == "ids"):
            continue
        upto = prev.prompt_tokens + prev.output_tokens
        if tuple(b[1][:prev.prompt_tokens]) == tuple(a[1]) and len(b[1]) >= upto:
            prev.content = ("ids", tuple(b[1][:upto]))


def open_loop_only(df: pd.DataFrame, what: str, why: str) -> None:
    """Refuse a session trace where only the trace's own times are modelled: its later turns'
    ``arrival_s`` only order the rows (README: Trace schema), so ``what`` would read placeholders."""
    if has_sessions(df):
        raise ConfigError(f"not modelled yet: {what} with a session trace (each turn is sent when the one "
                          f"before it ends, a closed loop; {why})")


def refuse(slots: int | None, sessions: bool, fe: FrontEnd | None, fleet: bool = False) -> str:
    """Raise the one-line refusal of clients not modelled yet (module docstring), else name them.
    Apart from :func:`closed_loop` so that a sweep checks every point before any runs."""
    what = "--max-concurrency" if not sessions else "a session trace"
    if slots is not None and sessions:
        raise ConfigError("not modelled yet: --max-concurrency with a session trace (give one)")
    if fe is None or (slots is None and not sessions):
        return what
    why = ("a fleet's API servers are solved after the run" if fleet else
           f"with {fe.servers} API servers a send on one can delay a reply already given on another"
           if fe.servers > 1 else "")
    if why:
        raise ConfigError(f"not modelled yet: {what} behind an API server here ({why}); "
                          f"pass --api-server-count {'0' if fleet else '1 or 0'}")
    return what


def closed_loop(spec: ClientSpec | None, trace: Trace, reqs: Sequence[Request],
                fe: FrontEnd | None, fleet: bool = False) -> ClosedLoop | None:
    """The clients of a run, or None when it is open loop (no --max-concurrency, no sessions).
    ``fleet``: behind a router (one replica's API server only is solved as the run goes)."""
    slots = spec.max_concurrency if spec is not None else None
    sess = sessions_of(trace)
    if slots is None and sess is None:
        return None
    what = refuse(slots, sess is not None, fe, fleet)
    if len(reqs) != trace.num_requests or any(r.parent >= 0 for r in reqs):
        raise ConfigError(f"not modelled yet: {what} with fanned-out samples (n > 1 or beam search)")
    live = LiveFrontEnd(fe, reqs) if fe is not None else None
    if sess is None:
        return ClosedLoop(reqs, slots, np.full(len(reqs), -1, np.int64), np.zeros(len(reqs)), live)
    follows, think = sess
    chain_content(reqs, follows)
    return ClosedLoop(reqs, None, follows, think, live)
