"""A run's arrays, laid out step by step (``sim/engine/fastforward/run_layout.py``).

Random runs -- one bucket and many, sync and async, step times held up by the roof, the floor
or the scheduler -- are laid out and every value checked against its definition: the blocks
taken (the buckets' pops), the context tokens, each step time the cost model's own scalar
(:func:`sim.cost.bulk.decode_step_time`'s function), the ends and busy times sequential float
sums. And the module compiled (Cython, where it was built) and run as Python give the same bits.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.bulk import DecodeTerms
from sim.cost.decode_time import step_time
from sim.engine.fastforward import run_layout
from sim.engine.fastforward.run_layout import lay_out_run
from tests.helpers import as_python


def random_run(rng: np.random.Generator) -> dict:
    B = int(rng.choice([1, 4, 16, 32]))
    buckets = sorted(rng.choice(np.arange(1, B + 1), size=int(rng.integers(1, min(B, 5) + 1)), replace=False))
    firsts = [(int(j0), int(rng.integers(1, 40))) for j0 in buckets]
    scale = float(rng.choice([1e-6, 1e-4, 1e-2]))  # small: the roof, floor or sched holds some steps up
    terms = DecodeTerms(*(float(x) for x in rng.random(6) * scale),
                        *(float(x) for x in rng.random(4) * 1e-3), bool(rng.random() < 0.5))
    return dict(H=int(rng.integers(1, 1100)), B=B, firsts=firsts, decoders=int(rng.integers(1, 300)),
                ctx0=int(rng.integers(0, 10**7)), pages=int(rng.integers(0, 10**5)), terms=terms,
                p_dt=float(rng.random()), p_start=float(rng.random() * 1e4), t=float(rng.random() * 1e4 + 1e4),
                busy0=float(rng.random() * 1e4), lag=int(rng.integers(0, 2)))


def by_definition(run: dict) -> list[list[float] | list[int]]:
    """The run's arrays, one Python number at a time (run_layout's docstring)."""
    H, B, lag = run["H"], run["B"], run["lag"]
    pops = [0] * B
    for j0, n in run["firsts"]:
        pops[j0 - 1] = n
    cum = [sum(pops[k % B] for k in range(o)) for o in range(1, H + 1)]
    ctx = [run["decoders"] * o + run["ctx0"] for o in range(1, H + 1)]
    dts = [run["p_dt"], *(step_time(*run["terms"], c, run["pages"] + u) for c, u in zip(ctx, cum, strict=True))]
    ends, busy = [run["p_start"], run["t"]], [run["busy0"]]
    for j in range(H):
        ends.append(ends[-1] + dts[j + 1])
        busy.append(busy[-1] + dts[j + 1 - lag])
    return [cum, ctx, dts, ends, busy]


@pytest.mark.parametrize("seed", range(4))
def test_a_run_is_laid_out_as_defined(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(10):
        run = random_run(rng)
        got = lay_out_run(**run)
        for name, want, a in zip(got._fields, by_definition(run), got, strict=True):
            assert a.dtype == (np.int64 if name in ("cum", "ctx") else np.float64)
            assert a.tolist() == want, f"{name} differs: {run}"


def test_the_compiled_layout_gives_the_pythons_bits() -> None:
    """Skipped where the module was not compiled (then it is that Python)."""
    py = as_python(run_layout)
    rng = np.random.default_rng(9)
    for _ in range(30):
        run = random_run(rng)
        for a, b in zip(lay_out_run(**run), py.lay_out_run(**run), strict=True):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_bad_arguments_raise_one_line_errors() -> None:
    run = random_run(np.random.default_rng(3))
    with pytest.raises(ValueError, match=r"first offset is in 1\.\.B"):
        lay_out_run(**{**run, "firsts": [(run["B"] + 1, 1)]})
    with pytest.raises(ValueError, match="a lag not 0 or 1"):
        lay_out_run(**{**run, "lag": 2})
    out = [np.empty(4, np.int64), np.empty(4, np.int64), np.empty(4), np.empty(6), np.empty(5)]
    with pytest.raises(ValueError, match="arrays too short"):
        run_layout.fill(*out, np.ones(4, np.int64), 1, 0, 0, run["terms"], 0.0, 0.0, 0.0, 0.0, 0)
