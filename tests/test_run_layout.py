"""A run's arrays, compiled (``_run_layout.c``) and with numpy, are the same bit for bit.

The numpy layout is the reference (``sim/engine/fastforward/run_layout.py``); the fast-forward
tests compare both end to end with ``--exact-steps`` (the compiled one wherever it was built).
Here random runs -- one bucket and many, sync and async, step times held up by the roof, the
floor or the scheduler -- are laid out both ways and every value compared as bits. Skipped,
with the reason, where the extension was not built.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.bulk import ArrayTimes, DecodeTerms
from sim.engine.fastforward import run_layout
from sim.engine.fastforward.run_layout import lay_out_numpy, lay_out_run
from tests.helpers import require_built


@pytest.fixture
def compiled() -> None:
    require_built(run_layout.COMPILED, "sim/engine/fastforward/_run_layout.c")


def random_run(rng: np.random.Generator) -> dict:
    B = int(rng.choice([1, 4, 16, 32]))
    buckets = sorted(rng.choice(np.arange(1, B + 1), size=int(rng.integers(1, min(B, 5) + 1)), replace=False))
    firsts = [(int(j0), int(rng.integers(1, 40))) for j0 in buckets]
    scale = float(rng.choice([1e-6, 1e-4, 1e-2]))  # small: the roof, floor or sched holds some steps up
    terms = DecodeTerms(*(float(x) for x in rng.random(6) * scale),
                        *(float(x) for x in rng.random(4) * 1e-3), bool(rng.random() < 0.5))
    return dict(H=int(rng.integers(1, 1100)), B=B, firsts=firsts, decoders=int(rng.integers(1, 300)),
                ctx0=int(rng.integers(0, 10**7)), pages=int(rng.integers(0, 10**5)), times=ArrayTimes(terms),
                p_dt=float(rng.random()), p_start=float(rng.random() * 1e4), t=float(rng.random() * 1e4 + 1e4),
                busy0=float(rng.random() * 1e4), lag=int(rng.integers(0, 2)))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_layout_is_numpys_bit_for_bit(compiled: None, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(50):
        run = random_run(rng)
        ref, got = lay_out_numpy(**run), lay_out_run(**run)
        for name, a, b in zip(ref._fields, ref, got, strict=True):
            assert same_bits(a, b), f"{name} differs: {run}"


def test_the_floats_are_exact_sequential_sums(compiled: None) -> None:
    """Not only the same as numpy: each end is the previous end plus the step's time."""
    rng = np.random.default_rng(7)
    run = random_run(rng)
    cum, ctx, dts, ends, busy = lay_out_run(**run)
    for j in range(run["H"]):
        assert ends[j + 2] == ends[j + 1] + dts[j + 1]
        assert dts[j + 1] == run["times"](ctx[j:j + 1], run["pages"] + cum[j:j + 1])[0]
    assert ends[1] == run["t"] and dts[0] == run["p_dt"] and busy[0] == run["busy0"]


def test_without_folded_terms_the_numpy_layout_runs(compiled: None) -> None:
    """A cost model with no decode terms has no compiled form: the times callable decides."""
    run = random_run(np.random.default_rng(3))
    plain = run["times"].__call__  # the same function, without .terms
    got = lay_out_run(**{**run, "times": plain})
    ref = lay_out_numpy(**run)
    assert all(same_bits(a, b) for a, b in zip(ref, got, strict=True))


def test_bad_arguments_raise_one_line_errors(compiled: None) -> None:
    fill = run_layout.COMPILED.lay_out  # type: ignore[union-attr]
    terms = DecodeTerms(*([1e-3] * 10), True)
    good = [np.empty(4, np.int64), np.empty(4, np.int64), np.empty(5), np.empty(6), np.empty(5)]
    with pytest.raises(ValueError, match="need 5 float64 values"):
        fill(*good[:2], np.empty(4, np.int64), *good[3:], [(1, 1)], 4, 1, 0, 0, terms, 0.0, 0.0, 0.0, 0.0, 0)
    with pytest.raises(ValueError, match=r"first offset is in 1\.\.B"):
        fill(*good, [(5, 1)], 4, 1, 0, 0, terms, 0.0, 0.0, 0.0, 0.0, 0)
    with pytest.raises(ValueError, match="11 fields"):
        fill(*good, [(1, 1)], 4, 1, 0, 0, terms[:5], 0.0, 0.0, 0.0, 0.0, 0)
    with pytest.raises(TypeError):
        fill(*good, [(1, 1)], 4, 1, 0, 0, terms, "x", 0.0, 0.0, 0.0, 0)
