"""Shared test helpers: one definition each, imported by the specification tests.

- :func:`req`                           a bare :class:`Request` (prompt, output, content ids)
- :func:`assert_fast_forward_identical` the bulk path vs ``--exact-steps``, frame by frame
- :func:`mooncake_slice`                the bundled Mooncake slice (prefix hashes), trimmed
- :func:`optional_data`                 a large optional file under ``KVSIM_DATA``, or a skip
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sim.request import Request

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "workloads" / "data" / "azure_conv_slice.csv"
MOONCAKE_SLICE = REPO / "workloads" / "data" / "mooncake_conv_slice.jsonl"


def req(uid: int, prompt: int, out: int = 4, *, ids: tuple[int, ...] | None = None, base: int | None = None,
        prio: int = 0, arrival: float = 0.0) -> Request:
    """A request of ``prompt`` tokens and ``out`` outputs. ``ids`` (or ``base``: the ids
    ``base .. base + prompt - 1``) give it token content, so equal prefixes share blocks."""
    if ids is None and base is not None:
        ids = tuple(range(base, base + prompt))
    return Request(uid=uid, request_id=str(uid), arrival_s=arrival, prompt_tokens=prompt, output_tokens=out,
                   priority=prio, content=("ids", ids) if ids is not None else None)


def assert_fast_forward_identical(cfg_kw: dict[str, Any], trace: Any, *, check: bool = False,
                                  expect_ff: bool = True) -> Any:
    """Run ``trace`` with fast-forward and with ``exact_steps``; every request and step column
    must be identical. Returns the fast-forward result."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    ff = simulate(make_config(**{**cfg_kw, "exact_steps": False}), trace, check=check)
    ex = simulate(make_config(**{**cfg_kw, "exact_steps": True}), trace, check=check)
    if expect_ff:
        assert ff.summary.fast_forward_steps > 0, "no step was fast-forwarded: the test proves nothing"
    pd.testing.assert_frame_equal(ff.requests, ex.requests, check_exact=True)
    pd.testing.assert_frame_equal(ff.steps, ex.steps, check_exact=True)
    return ff


def mooncake_slice(n: int = 80, max_prompt: int = 8000) -> Any:
    """The first ``n`` requests under ``max_prompt`` tokens of the bundled Mooncake slice."""
    from tests.conftest import make_trace
    from workloads import load_trace

    tr = load_trace(MOONCAKE_SLICE)
    df = tr.df[tr.df["prompt_tokens"] < max_prompt].head(n).reset_index(drop=True)
    return make_trace(df.to_dict("records"))


def optional_data(*parts: str) -> Path:
    """``$KVSIM_DATA/<parts>``, or skip the test with the reason (large data is not shipped)."""
    root = os.environ.get("KVSIM_DATA")
    if not root:
        pytest.skip(f"optional data {'/'.join(parts)}: set KVSIM_DATA to the folder that holds it")
    path = Path(root).joinpath(*parts)
    if not path.exists():
        pytest.skip(f"optional data {path} not found (KVSIM_DATA={root})")
    return path
