"""The API server in front of one replica, solved as the run goes: closed-loop clients.

A ``--max-concurrency`` client sends its next request when the last token of one before it
reaches it, so a send waits on the server's egress, and the request sent then runs its ingress
on that same server. The egress queue (:mod:`sim.frontend.egress`) is causal, and with one
server every delivery is known at the engine finish that completes it:

- FIFO: a request's last chunk waits only for work that reached the server before it;
- the ingress the server runs before that delivery belongs to requests already sent: a send
  happens at a delivery, and deliveries come in the order of the finishes behind them, so a
  later finish can only send after this delivery (its ingress cannot cut in).

So at each finish the server is solved up to that instant, one chunk of batches (the step ends
since the last finish, first tokens, last chunks) with the backlog carried
(:class:`~sim.frontend.egress.Stream`): the client's time of the finished request is known, the
next request is sent then, its ingress runs at once, and its engine arrival joins the replica's
inbox. The replica steps exactly, since the egress needs every step's end as it happens.

Refused (:mod:`sim.run.clients`): several API servers (a finish on one could send to another
and delay a delivery already given) and session traces (a turn's think time can send a later
finish's turn first). A rejected request's error reply carries no work; its slot frees when the
server has done the work queued before it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

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

    def send(self, r: Request, t: float) -> None:
        """``r`` is sent at ``t``: its ingress starts when the server is free of ingress, and its
        engine arrival (``r.arrival_s``) is when that ends."""
        start = max(t, self._busy[-1][1]) if self._busy else t
        end = start + float(self._service[r.uid])
        self._busy.append((start, end))
        self.send_s[r.uid], self.engine_s[r.uid], r.arrival_s = t, end, end
        self._live.append(r)

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
        f = np.array([r.first_token_s for r in live], np.float64)
        done = np.array([r.status is Status.FINISHED for r in live], bool)
        e = np.where(done, np.array([r.finish_s for r in live], np.float64), math.inf)
        n = np.array([r.output_tokens for r in live], np.int64)
        out = np.array([r.num_output for r in live], np.int64)
        new_f, new_e = (f > t0) & (f <= upto), done & (e > t0) & (e <= upto)
        ends = self._ends[:self._n]
        has = f >= 0
        mids = middle_counts(ends, k0, k1, f[has], e[has], n[has])
        t_rej = np.full(len(rejected), upto)
        u, work = batches([f[new_f], e[new_e], ends[k0:k1][mids > 0], t_rej],
                          [np.full(int(new_f.sum()), self._w1), last_work(out[new_e], self._token, self._end),
                           self._token * mids[mids > 0], np.zeros(len(rejected))])
        while self._b0 < len(self._busy) and self._busy[self._b0][1] <= t0:
            self._b0 += 1
        busy = np.array(self._busy[self._b0:], np.float64).reshape(-1, 2)
        d = self._stream.solve(Capacity.of(busy[:, 0], busy[:, 1]), u, work)
        uid = np.array([r.uid for r in live], np.int64)
        self.first[uid[new_f]] = d[np.searchsorted(u, f[new_f])]
        self.finish[uid[new_e]] = d[np.searchsorted(u, e[new_e])]
        self._reply = {r.uid: float(d[np.searchsorted(u, upto)]) for r in rejected}
        gone = {r.uid for r in rejected} | set(uid[done].tolist())
        self._live = [r for r in live if r.uid not in gone]
        self._t, self._k = upto, k1

    def columns(self) -> dict[str, np.ndarray]:
        """After the run: every request's client times set and the front end's columns (as
        :func:`~sim.frontend.stage.leave` gives an open loop's)."""
        self._solve(math.inf, [])
        sent = ~np.isnan(self.send_s)
        send = np.where(sent, self.send_s, [r.arrival_s for r in self.reqs])
        return client_times(self.reqs, send, np.where(sent, self.engine_s, send),
                            np.where(sent, 0, -1).astype(np.int64), self.first, self.finish)
