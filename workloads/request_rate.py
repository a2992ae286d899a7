"""Arrival times as ``vllm bench serve --request-rate R --burstiness B`` makes them.

vLLM's benchmark client (``vllm/benchmarks/serve.py``, ``get_request``) draws one inter-arrival
delay per request, in the order the dataset gives them: ``gamma(shape=B, scale=1 / (R * B))``
(mean ``1/R``; ``B = 1`` is a Poisson process, ``B < 1`` burstier, ``B > 1`` more regular;
``B = inf`` a constant ``1/R``). It sends request ``i`` at the cumulative sum of the first
``i + 1`` delays, then rescales every send time so the last request goes out at exactly
``N / R`` (its "target total delay": the measured rate does not wander by the 1-2 % the sum of
random delays would). ``R = inf`` sends everything at t = 0. kvsim does the same with its own
seeded Generator (:func:`arrival_stream`), so the draws are vLLM's in distribution, not bit for
bit (vLLM uses numpy's legacy global state). vLLM clients before the rescaling sent the first
request at t = 0; the difference is one gap.

:func:`apply_request_rate` replaces a trace's own times with these, requests in trace order.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sim.errors import ConfigError
from workloads.schema import Trace

#: the request-rate draws' own stream of the run's seed, apart from the arrival jitter's (7) and
#: the scheduler's: choosing a rate never shifts the other draws
REQUEST_RATE_STREAM = 49


def arrival_stream(seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, REQUEST_RATE_STREAM])


def parse_rate(text: str | float, flag: str = "--request-rate") -> float:
    """``inf`` or a number > 0 (req/s); one-line ConfigError otherwise."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} {text!r}: expected requests per second (> 0) or inf") from None
    if math.isnan(v) or v <= 0:
        raise ConfigError(f"{flag} {text!r}: must be > 0 (or inf: everything at t = 0)")
    return v


def check_burstiness(b: float, flag: str = "--burstiness") -> float:
    if math.isnan(b) or b <= 0:
        raise ConfigError(f"{flag} {b!r}: must be > 0 (1 = Poisson; < 1 burstier, > 1 more regular)")
    return float(b)


def request_rate_arrivals(n: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Send times of ``n`` requests at ``rate`` req/s with gamma(``burstiness``) gaps (module docstring)."""
    parse_rate(rate)
    check_burstiness(burstiness)
    if n == 0 or math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    if t[-1] > 0:
        t = t * ((n / rate) / t[-1])
    return t


def describe(rate: float, burstiness: float) -> str:
    if math.isinf(rate):
        return "--request-rate inf: every request at t = 0"
    kind = "Poisson" if burstiness == 1 else "constant gaps" if math.isinf(burstiness) else "gamma gaps"
    return f"--request-rate {rate:g} req/s, --burstiness {burstiness:g} ({kind}, as vllm bench serve)"


def apply_request_rate(trace: Trace, rate: float, burstiness: float, seed: int) -> Trace:
    """``trace`` with its arrival times replaced by :func:`request_rate_arrivals` (requests in trace
    order); the trace's own times are not used. The note says so."""
    df = trace.df.copy()
    df["arrival_s"] = request_rate_arrivals(len(df), rate, burstiness, arrival_stream(seed))
    note = f"arrivals replaced: {describe(rate, burstiness)}, seed {seed}; the trace's own times are not used"
    return dataclasses.replace(trace, df=df, notes=(*trace.notes, note))
