"""The API server in front of one replica, solved as the run goes: closed-loop clients.

A closed-loop client (``--max-concurrency``, a session's next turn) sends when the last chunk of
a request before reaches it, so a send waits on the server's egress, and the request sent then
runs its ingress on that same server. The egress queue (:mod:`sim.frontend.egress`) is causal,
and with one server every delivery is known at the engine finish that completes it:

- FIFO: a request's last chunk waits only for work that reached the server before it;
- the ingress the server runs before that delivery belongs to requests sent before it: a send
  follows a delivery, and deliveries come in the order of the finishes behind them, so a later
  finish can only send after this delivery. Every send before it is known by then.

So at each finish the server is solved up to that instant, one chunk of batches (the step ends
since the last finish, first tokens, last chunks) with the backlog carried
(:class:`~sim.frontend.egress.Stream`); a send made before a delivery of the chunk has its
ingress run first (it has priority) and the chunk is solved again. A send's ingress is fixed in
send order once the clock reaches it (a later finish may send earlier, after a shorter think
time), and the request reaches the replica when its ingress ends. The replica steps exactly,
since the egress needs every step's end as it happens.

Refused (:mod:`sim.run.clients`): several API servers (a finish on one could send to another
and delay a delivery already given) and fleets. A rejected request's error reply carries no
work; the client has it when the server has done the work queued before it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np
import simpy

from sim.frontend.egress import Capacity, Stream, batches, last_work, middle_counts
from sim.frontend.stage import FrontEnd, client_times
from sim.request import Request, Status


class LiveFrontEnd:
    """One API server in front of one replica, solved at every finish (module docstring)."""

    def __init__(self, fe: FrontEnd, reqs: Sequence[Request]) -> None:
        p, n = fe.profile, len(reqs)
        self.reqs = reqs
        self._w1, self._token, self._end = p.first_token_s(fe.endpoint), p.output_token_s, p.end_s
        self._service = p.ingress_s(np.array([r.prompt_tokens for r in reqs], np.float64), fe.endpoint)
        self.send_s, self.engine_s, self.first, self.finish = (np.full(n, math.nan) for _ in range(4))
        self._busy: list[tuple[float, float]] = []  # ingress intervals, in time order
        self._b0 = 0                                # the first that can still matter
        self._ends = np.zeros(1024)                 # the replica's step ends so far: _ends[:_n]
        self._n = self._k = 0                       # step ends known / solved
        self._t = -math.inf                         # solved up to (inclusive)
        self._stream = Stream()
        self._live: list[Request] = []              # sent, last chunk (or error reply) not delivered
        self._reply: dict[int, float] = {}          # a rejected request's error reply, delivered
        self._sends: list[tuple[float, int, Request]] = []  # sent, ingress not fixed yet (a heap)
        self._env: simpy.Environment | None = None
        self._submit: Callable[[Request], None] | None = None

    def attach(self, env: simpy.Environment, submit: Callable[[Request], None]) -> None:
        """Hand each request to the replica (``submit``: ``Replica.submit``) when its ingress ends."""
        self._env, self._submit = env, submit

    def send(self, r: Request, t: float) -> None:
        """``r`` is sent at ``t`` (now or later): it reaches the replica when its ingress ends."""
        assert self._env is not None  # (attached)
        self.send_s[r.uid] = t
        heapq.heappush(self._sends, (t, r.uid, r))
        self._env.process(self._enter(r, t))

    def _enter(self, r: Request, t: float) -> Generator[simpy.Event, Any, None]:
        env = self._env
        assert env is not None
        yield env.timeout(t - env.now)
        self._ingress_upto(env.now)  # every send before now is known: its place in the FIFO is fixed
        yield env.timeout(r.arrival_s - env.now)
        self._live.append(r)
        assert self._submit is not None
        self._submit(r)

    def _ingress_upto(self, t: float) -> None:
        """Fix the ingress of every send at or before ``t``, in send order: each starts when the
        server is free of ingress, and the engine sees it (``arrival_s``) when that ends."""
        sends, busy = self._sends, self._busy
        while sends and sends[0][0] <= t:
            s, uid, r = heapq.heappop(sends)
            start = max(s, busy[-1][1]) if busy else s
            end = start + float(self._service[uid])
            busy.append((start, end))
            self.engine_s[uid] = r.arrival_s = end

    def step_end(self, t: float) -> None:
        """A step of the replica ended at ``t`` (``Replica.on_step``, or a finish's own step)."""
        if self._n and t <= self._ends[self._n - 1]:
            return
        if self._n == len(self._ends):
            self._ends = np.concatenate((self._ends, np.zeros(len(self._ends))))
        self._ends[self._n] = t
        self._n += 1

    def released(self, gone: Sequence[Request], t: float) -> list[float]:
        """``gone`` left the engine at ``t`` (finished at a step end, or rejected): solve the
        server up to ``t`` and return when each one's client has its last chunk (or error)."""
        if any(r.status is Status.FINISHED for r in gone):
            self.step_end(t)
        self._solve(t, [r for r in gone if r.status is not Status.FINISHED])
        return [float(self.finish[r.uid]) if r.status is Status.FINISHED else self._reply[r.uid] for r in gone]

    def _solve(self, upto: float, rejected: list[Request]) -> None:
        live, t0, k0, k1 = self._live, self._t, self._k, self._n
        rows = np.array([(r.first_token_s, r.finish_s if r.status is Status.FINISHED else math.inf, r.output_tokens,
                          r.num_output, r.uid) for r in live], np.float64).reshape(-1, 5)
        f, e = rows[:, 0], rows[:, 1]
        n, out, uid = rows[:, 2].astype(np.int64), rows[:, 3].astype(np.int64), rows[:, 4].astype(np.int64)
        done = e < math.inf
        new_f, new_e = (f > t0) & (f <= upto), done & (e > t0) & (e <= upto)
        ends = self._ends[:self._n]
        has = f >= 0
        mids = middle_counts(ends, k0, k1, f[has], e[has], n[has])
        t_rej = np.full(len(rejected), upto)
        u, work = batches([f[new_f], e[new_e], ends[k0:k1][mids > 0], t_rej],
                          [np.full(int(new_f.sum()), self._w1), last_work(out[new_e], self._token, self._end),
                           self._token * mids[mids > 0], np.zeros(len(rejected))])
        d = self._solved(u, work)
        self.first[uid[new_f]] = d[np.searchsorted(u, f[new_f])]
        self.finish[uid[new_e]] = d[np.searchsorted(u, e[new_e])]
        self._reply = {r.uid: float(d[np.searchsorted(u, upto)]) for r in rejected}
        gone = {r.uid for r in rejected} | set(uid[done].tolist())
        self._live = [r for r in live if r.uid not in gone]
        self._t, self._k = upto, k1

    def _solved(self, times: np.ndarray, work: np.ndarray) -> np.ndarray:
        """The chunk's deliveries; solved again while a send not fixed yet comes before one (its
        ingress goes first)."""
        st, t0, b0 = self._stream, self._stream.t, self._stream.backlog
        while True:
            while self._b0 < len(self._busy) and self._busy[self._b0][1] <= t0:
                self._b0 += 1
            busy = np.array(self._busy[self._b0:], np.float64).reshape(-1, 2)
            d = st.solve(Capacity.of(busy[:, 0], busy[:, 1]), times, work)
            last = float(d.max()) if len(d) else -math.inf
            if not self._sends or self._sends[0][0] > last:
                return d
            st.t, st.backlog = t0, b0
            self._ingress_upto(last)

    def columns(self) -> dict[str, np.ndarray]:
        """After the run: every request's client times set and the front end's columns (as
        :func:`~sim.frontend.stage.leave` gives an open loop's)."""
        self._solve(math.inf, [])
        sent = ~np.isnan(self.send_s)
        send = np.where(sent, self.send_s, [r.arrival_s for r in self.reqs])
        return client_times(self.reqs, send, np.where(sent, self.engine_s, send),
                            np.where(sent, 0, -1).astype(np.int64), self.first, self.finish)
