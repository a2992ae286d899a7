"""The YAML schema of a synthetic workload, validated with pydantic.

Example::

    seed: 7
    duration_s: 600          # and/or num_requests
    arrivals: {kind: gamma, rate: 5.0, cv: 2.0}
    prompt: {kind: lognormal, median: 800, sigma: 1.0}
    output: {kind: uniform, low: 50, high: 400}
    correlation: 0.4         # Gaussian-copula correlation of prompt and output
    max_model_len: 4096
    n: {values: [1, 2, 4], weights: [0.8, 0.15, 0.05]}
    sharing:
      block_size: 16
      system_prompt: {tokens: 600, fraction: 0.5}
      multi_turn: {fraction: 0.3, turns: {kind: uniform, low: 2, high: 5}, think_time_s: 20}

With sharing, ``prompt`` is the length of the *new* user text of each request; the shared
system prompt and the conversation history come on top of it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Pos = Annotated[float, Field(gt=0)]
PosInt = Annotated[int, Field(ge=1)]
Frac = Annotated[float, Field(ge=0, le=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---- arrivals ---------------------------------------------------------------------------
class Poisson(_Strict):
    kind: Literal["poisson"]
    rate: Pos


class Gamma(_Strict):
    """Renewal process with Gamma gaps: mean 1/rate, coefficient of variation ``cv``."""

    kind: Literal["gamma"]
    rate: Pos
    cv: Pos


class Piecewise(_Strict):
    """Rate curve through ``points`` ``[t_s, rate]``; repeats every ``period_s`` if given."""

    kind: Literal["piecewise"]
    points: list[tuple[Annotated[float, Field(ge=0)], Annotated[float, Field(ge=0)]]] = Field(min_length=1)
    interpolate: Literal["step", "linear"] = "step"
    period_s: Pos | None = None
    cv: Pos = 1.0

    @model_validator(mode="after")
    def _sorted(self) -> Piecewise:
        ts = [p[0] for p in self.points]
        if ts != sorted(ts) or ts[0] != 0:
            raise ValueError("points must start at t=0 and be sorted by time")
        return self


class Sinusoid(_Strict):
    """Diurnal curve ``mean_rate * (1 + amplitude * sin(2 pi (t + phase_s) / period_s))``."""

    kind: Literal["sinusoid"]
    mean_rate: Pos
    amplitude: Frac = 0.5
    period_s: Pos = 86400.0
    phase_s: float = 0.0
    cv: Pos = 1.0


class TraceRate(_Strict):
    """The per-``bin_s`` arrival rate of a trace file, times ``scale``, repeated."""

    kind: Literal["trace_rate"]
    path: str
    format: str | None = None
    bin_s: Pos = 60.0
    scale: Pos = 1.0
    cv: Pos = 1.0


class ClosedLoop(_Strict):
    """``clients`` users who each send, wait ``latency_s`` for the answer, think, send again.

    Think times are Gamma with mean ``think_time_s`` and CV ``think_cv`` (1 = exponential).
    The answer latency is unknown before simulation, so it is a fixed assumption here; the
    trace carries ``client_id`` so a closed-loop driver can re-time it.
    """

    kind: Literal["closed_loop"]
    clients: PosInt
    think_time_s: Pos
    think_cv: Pos = 1.0
    latency_s: Annotated[float, Field(ge=0)] = 0.0


Arrivals = Annotated[Poisson | Gamma | Piecewise | Sinusoid | TraceRate | ClosedLoop,
                     Field(discriminator="kind")]


# ---- lengths ----------------------------------------------------------------------------
class Fixed(_Strict):
    kind: Literal["fixed"]
    value: PosInt


class Uniform(_Strict):
    """Integers ``low..high`` inclusive."""

    kind: Literal["uniform"]
    low: PosInt
    high: PosInt

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if self.high < self.low:
            raise ValueError("high must be >= low")
        return self


class LogNormal(_Strict):
    """``round(median * exp(sigma * Z))``, at least 1."""

    kind: Literal["lognormal"]
    median: Pos
    sigma: Pos


class Zipf(_Strict):
    """Bounded Zipf on ``min..max``: P(k) proportional to k**-a."""

    kind: Literal["zipf"]
    a: Pos
    min: PosInt = 1
    max: PosInt

    @model_validator(mode="after")
    def _order(self) -> Zipf:
        if self.max < self.min:
            raise ValueError("max must be >= min")
        if self.max - self.min > 50_000_000:
            raise ValueError("support max-min is limited to 5e7")
        return self


class Empirical(_Strict):
    """Resample a column of any trace file (default: the column this spec describes)."""

    kind: Literal["empirical"]
    path: str
    format: str | None = None
    column: Literal["prompt_tokens", "output_tokens"] | None = None


Lengths = Annotated[Fixed | Uniform | LogNormal | Zipf | Empirical, Field(discriminator="kind")]


# ---- sharing ----------------------------------------------------------------------------
class SystemPrompt(_Strict):
    tokens: PosInt
    fraction: Frac


class MultiTurn(_Strict):
    """A ``fraction`` of conversations have ``turns`` turns, ``think_time_s`` apart (mean)."""

    fraction: Frac
    turns: Lengths
    think_time_s: Pos = 30.0


class Sharing(_Strict):
    block_size: PosInt = 16
    system_prompt: SystemPrompt | None = None
    multi_turn: MultiTurn | None = None


class Choice(_Strict):
    values: list[PosInt] = Field(min_length=1)
    weights: list[Annotated[float, Field(ge=0)]] | None = None

    @model_validator(mode="after")
    def _same_len(self) -> Choice:
        if self.weights is not None and (len(self.weights) != len(self.values) or sum(self.weights) <= 0):
            raise ValueError("weights must match values and sum to > 0")
        return self


class Spec(_Strict):
    seed: int | None = None
    num_requests: PosInt | None = None
    duration_s: Pos | None = None
    arrivals: Arrivals
    prompt: Lengths
    output: Lengths
    correlation: Annotated[float, Field(ge=-1, le=1)] = 0.0
    max_model_len: Annotated[int, Field(ge=2)] | None = None
    sharing: Sharing | None = None
    n: PosInt | Choice = 1
    beam_width: PosInt | Choice = 1

    @model_validator(mode="after")
    def _bounded(self) -> Spec:
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s (or both)")
        return self
