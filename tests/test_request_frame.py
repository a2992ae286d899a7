"""The per-request table (``sim/io/results.py``): one row per request, each column the request's
attribute as it holds it, with vLLM's finish reasons and NaN where a time was never set; the
summary's narrower table (``request_columns``) is the same values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.io import results
from sim.io.results import REQUEST_COLUMNS, request_columns, request_frame
from sim.request import Request, Status
from sim.run import simulate as sim_run
from tests.helpers import req


def requests_in_every_state() -> list[Request]:
    """Finished (stop and length), rejected, running and waiting requests, with distinct counts."""
    rs = [req(i, 10 + i, out=3 + i, arrival=0.5 * i) for i in range(5)]
    for i, r in enumerate(rs):
        r.first_scheduled_step, r.finish_step, r.num_preemptions, r.prefix_hit_tokens = 10 + i, 20 + i, i, 16 * i
    stop, length, rejected, running, _waiting = rs
    for r, t in ((stop, 2.0), (length, 3.0)):
        r.status, r.first_scheduled_s, r.first_token_s, r.finish_s = Status.FINISHED, t, t + 0.25, t + 1.25
    length.length_capped = True
    rejected.status, rejected.reject_reason, rejected.reject_detail = Status.REJECTED, "kv_pool", "needs 9 blocks"
    running.status, running.first_scheduled_s, running.first_token_s = Status.RUNNING, 4.0, 4.5
    return rs


def test_each_row_holds_its_requests_attributes() -> None:
    rs = requests_in_every_state()
    f = request_frame(rs)
    assert list(f.columns) == list(REQUEST_COLUMNS)
    assert list(f.request_id) == [r.request_id for r in rs]
    assert list(f.prompt_tokens) == [10, 11, 12, 13, 14] and list(f.output_tokens) == [3, 4, 5, 6, 7]
    assert list(f.arrival_s) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert list(f.first_scheduled_step) == [10, 11, 12, 13, 14] and list(f.finish_step) == [20, 21, 22, 23, 24]
    assert list(f.num_preemptions) == [0, 1, 2, 3, 4] and list(f.prefix_hit_tokens) == [0, 16, 32, 48, 64]
    assert list(f.status) == ["finished", "finished", "rejected", "unfinished", "unfinished"]
    reasons = list(f.finish_reason)
    assert reasons[:3] == ["stop", "length", "rejected"] and all(pd.isna(x) for x in reasons[3:])
    assert f.reject_reason[2] == "kv_pool" and f.reject_reason.isna().sum() == 4
    assert f.reject_detail[2] == "needs 9 blocks" and f.reject_detail.isna().sum() == 4
    assert f.ttft_s[0] == 0.25 + 2.0 and f.e2e_s[1] == 4.25 - 0.5 and f.tpot_s[0] == 1.0 / 2
    assert math.isnan(f.finish_s[3]) and f.first_token_s[3] == 4.5  # running: no finish yet
    assert f[["first_scheduled_s", "first_token_s", "finish_s"]].iloc[4].isna().all()  # waiting: never scheduled


def test_the_summary_columns_are_the_frames_values() -> None:
    rs = requests_in_every_state()
    narrow, full = request_columns(rs), request_frame(rs)
    pd.testing.assert_frame_equal(narrow, full[list(narrow.columns)], check_exact=True)


def test_no_requests_give_the_empty_table_with_every_column() -> None:
    f = request_frame([])
    assert list(f.columns) == list(REQUEST_COLUMNS) and len(f) == 0
    assert len(request_columns([])) == 0


def test_one_attribute_read_alone_is_a_column_too() -> None:
    from sim.io.results import attr_columns

    rs = requests_in_every_state()
    assert list(attr_columns(rs, ("finish_step",), int)["finish_step"]) == [20, 21, 22, 23, 24]


def test_a_runs_table_holds_each_requests_attributes(bundled_trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sim.io.fill.gather_attrs`` reads the integer and float attributes of every request; the
    table holds each request's values as Python reads them, value for value, list or not."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    reqs: list[Request] = []
    monkeypatch.setattr(sim_run, "request_frame", lambda rs: reqs.extend(rs) or request_frame(rs))
    simulate(make_config(model="llama-3.1-8b", gpu="h100", max_num_seqs=8), bundled_trace)
    reqs[3].status, reqs[4].status = Status.REJECTED, Status.RUNNING  # every status (an int enum)
    reqs[5].arrival_s = 7  # an int in a float column
    got = request_frame(reqs)
    pd.testing.assert_frame_equal(got, request_frame(tuple(reqs)), check_exact=True)
    for name in ("prompt_tokens", "output_tokens", "num_preemptions", "prefix_hit_tokens", "finish_step"):
        assert got[name].tolist() == [getattr(r, name) for r in reqs], name
    assert got["arrival_s"].tolist() == [float(r.arrival_s) for r in reqs]
    assert len(got) == len(bundled_trace.df) and set(got.status) >= {"finished", "rejected", "unfinished"}


def test_gathering_an_attribute_that_is_not_a_number_raises() -> None:
    from sim.io.fill import gather_attrs

    rs = requests_in_every_state()
    rs[2].arrival_s = "late"  # type: ignore[assignment]  # (the wrong kind: the point)
    with pytest.raises(TypeError):
        gather_attrs(rs, ("arrival_s",), None, np.empty(5).data)
    with pytest.raises(AttributeError):
        gather_attrs(rs, ("no_such",), np.empty(5, np.int64).data, None)
    with pytest.raises(ValueError, match="need"):
        gather_attrs(rs, ("finish_step",), np.empty(4, np.int64).data, None)
    with pytest.raises(TypeError, match="int64 or float64"):
        results.attr_columns(rs, ("finish_step",), np.int32)
    out = np.zeros((5, 2), np.int64)
    gather_attrs(rs, ("finish_step", "status"), out.reshape(-1).data, None)
    assert out.tolist() == [[r.finish_step, int(r.status)] for r in rs]
