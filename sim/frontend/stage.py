"""The API-server stage around one replica's engine: a pre-stage on the arrivals, a post-stage on
the request records; the engine and its fast-forward are untouched.

    fe = FrontEnd.of(cfg)               # None: no API server modelled (--api-server-count 0)
    ing, inbox = enter(reqs, fe)        # each request's arrival_s is now its engine arrival
    rep.submit_all(inbox)               # (in engine-arrival order)
    env.run()
    columns = leave(reqs, fe, ing, [step_ends(rep.log.frame())])
                                        # arrival_s back to the send time; first_token_s and
                                        # finish_s now when the client receives them

So ``ttft_s`` and ``e2e_s`` are what a client measures (``vllm bench serve``), and the engine's
own queueing stays visible as ``first_scheduled_s - engine_arrival_s``. Everything is a function
of the send times, the engine's token times and its step ends: no randomness, and the same in
fast-forward and ``--exact-steps`` runs, since their engine times are. A closed loop, whose sends
wait on deliveries, solves the same server as the run goes (:mod:`sim.frontend.live`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from sim.config.schema import SimConfig
from sim.frontend.egress import deliver
from sim.frontend.ingress import Ingress, ingress
from sim.frontend.profile import VLLM_API_SERVER, Endpoint, FrontendProfile
from sim.io.results import attr_columns
from sim.request import Request, Status

#: the columns requests.parquet gains (present with or without an API server)
FRONTEND_COLUMNS = ("api_server", "engine_arrival_s", "api_ingress_s", "api_first_egress_s", "api_egress_s")


@dataclass(frozen=True, slots=True)
class FrontEnd:
    """``servers`` API-server processes with ``profile``'s service times, serving ``endpoint``."""

    profile: FrontendProfile
    servers: int
    endpoint: Endpoint

    @classmethod
    def of(cls, cfg: SimConfig, profile: FrontendProfile = VLLM_API_SERVER) -> FrontEnd | None:
        return cls(profile, cfg.api_server_count, cfg.endpoint) if cfg.api_server_count else None

    def line(self) -> str:
        """One line for the user: how many servers, which endpoint, whose numbers."""
        return f"{self.servers} x {self.endpoint}, {self.profile.line()}"


def fleet_frontend(cfgs: Sequence[SimConfig]) -> FrontEnd | None:
    """The fleet's API servers: each replica's ``api_server_count`` processes pooled into one FIFO
    in front of the router (a gateway spreading requests over every replica's API server; one
    replica: exactly ``simulate``'s). None when no replica models one."""
    servers = sum(c.api_server_count for c in cfgs)
    fe = FrontEnd.of(cfgs[0])
    return replace(fe, servers=servers) if fe is not None and servers else None


def _attrs(reqs: Sequence[Request], names: tuple[str, ...], dtype: Any) -> list[np.ndarray]:
    """The attributes ``names`` of every request, one numpy column each, in ``names``' order."""
    cols = attr_columns(reqs, names, dtype)
    return [cols[n] for n in names]


def enter(reqs: Sequence[Request], fe: FrontEnd) -> tuple[Ingress, list[Request]]:
    """Run every request's ingress; set its ``arrival_s`` to its engine arrival. Returns the
    ingress and the requests in engine-arrival order (ties: uid), the engine's inbox order."""
    (send,) = _attrs(reqs, ("arrival_s",), np.float64)
    parent, prompt = _attrs(reqs, ("parent", "prompt_tokens"), np.int64)
    leader = np.where(parent >= 0, parent, np.arange(len(reqs)))
    service = fe.profile.ingress_s(prompt, fe.endpoint)
    ing = ingress(send, service, leader, fe.servers)
    for r, t in zip(reqs, ing.engine_arrival_s.tolist(), strict=True):
        r.arrival_s = t
    order = np.lexsort((np.arange(len(reqs)), ing.engine_arrival_s))
    return ing, [reqs[i] for i in order.tolist()]


def step_ends(steps: pd.DataFrame) -> np.ndarray:
    """A replica's step ends (increasing), from its steps frame."""
    return (steps["start_s"] + steps["duration_s"]).to_numpy(np.float64) if len(steps) else np.zeros(0)


def leave(reqs: Sequence[Request], fe: FrontEnd, ing: Ingress, ends: Sequence[np.ndarray],
          replica: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Stream every request's tokens through its API server (:mod:`sim.frontend.egress`):
    ``first_token_s`` and ``finish_s`` become the client's times, ``arrival_s`` the send time
    again. ``ends``: each replica's step ends; ``replica``: per request (uid order) the one that
    decoded it (None: one replica). Returns the new columns."""
    first, finish = _attrs(reqs, ("first_token_s", "finish_s"), np.float64)
    status, n_out, n_max = _attrs(reqs, ("status", "num_output", "output_tokens"), np.int64)
    finish = np.where(status == Status.FINISHED, finish, -1.0)
    p = fe.profile
    rep = np.zeros(len(reqs), np.int64) if replica is None else np.asarray(replica, np.int64)
    got_first, got_finish = deliver(first, finish, n_out, n_max, ing.server, ing.busy, rep, list(ends),
                                    p.first_token_s(fe.endpoint), p.output_token_s, p.end_s)
    return client_times(reqs, ing.send_s, ing.engine_arrival_s, ing.server, got_first, got_finish)


def client_times(reqs: Sequence[Request], send: np.ndarray, engine: np.ndarray, server: np.ndarray,
                 got_first: np.ndarray, got_finish: np.ndarray) -> dict[str, np.ndarray]:
    """Set each request's times to its client's (send, first token, last token) and return the
    front-end's columns (engine times kept in them as differences)."""
    first, finish = _attrs(reqs, ("first_token_s", "finish_s"), np.float64)
    for r, a, f1, f2 in zip(reqs, send.tolist(), got_first.tolist(), got_finish.tolist(), strict=True):
        r.arrival_s = a
        if f1 == f1:  # not NaN: the engine gave it a token
            r.first_token_s = f1
        if f2 == f2:
            r.finish_s = f2
    return {"api_server": server, "engine_arrival_s": engine, "api_ingress_s": engine - send,
            "api_first_egress_s": got_first - first, "api_egress_s": got_finish - finish}


def no_frontend(reqs: Sequence[Request]) -> dict[str, np.ndarray]:
    """The columns of a run without an API server: the engine saw each request when it was sent."""
    send, first = _attrs(reqs, ("arrival_s", "first_token_s"), np.float64)
    (status,) = _attrs(reqs, ("status",), np.int64)
    finished = status == Status.FINISHED
    zero = np.zeros(len(reqs))
    return {"api_server": np.full(len(reqs), -1, np.int64), "engine_arrival_s": send, "api_ingress_s": zero,
            "api_first_egress_s": np.where(first >= 0, zero, np.nan),
            "api_egress_s": np.where(finished, zero, np.nan)}


def with_columns(frame: pd.DataFrame, columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """``frame`` (one row per request, uid order) with the front-end's columns appended."""
    for name in FRONTEND_COLUMNS:
        frame[name] = columns[name]
    return frame
