"""Trace rows become requests: plain rows (no fan-out, no content columns) take a short path
that must make exactly the requests the general loop makes."""

from __future__ import annotations

import pytest

from sim.config import make_config
from sim.io.ingest import make_requests
from sim.request import FIELDS, Request
from workloads.schema import Trace


def fields(r: Request) -> tuple[object, ...]:
    return tuple(getattr(r, f) for f in FIELDS)


@pytest.mark.parametrize("priority", [False, True])
def test_plain_rows_give_the_requests_of_the_general_loop(bundled_trace: Trace, priority: bool) -> None:
    df = bundled_trace.df.copy()
    if priority:
        df["priority"] = [i % 3 for i in range(len(df))]
    cfg = make_config(model="llama-3.1-8b", gpu="h100")
    plain = make_requests(Trace(df=df, path="plain.csv", format="csv"), cfg)
    general = make_requests(Trace(df=df.assign(n=1), path="plain.csv", format="csv"), cfg)  # n: the loop
    assert len(plain) == len(general) == len(df)
    assert [fields(r) for r in plain] == [fields(r) for r in general]
    assert [r.uid for r in plain] == list(range(len(df)))
    assert any(r.priority for r in plain) == priority
