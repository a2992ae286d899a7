"""Replay a measured serving stage through the simulator itself and read its per-stage means.

The trace (one seeded numpy Generator, :func:`stage_trace`):

- arrivals: every 1 / rate seconds (inference-perf ``constant``) or Poisson, for the stage's
  duration or the first ``window_s`` seconds of it;
- prompt lengths drawn from the measured quantiles (inverse CDF, linear between quantiles);
- output lengths: the requested max_tokens under ``ignore_eos`` (see ``Stage.output_tokens``),
  else drawn from the measured quantiles;
- shared system prompts: each request picks one of ``groups`` prompts; its full blocks are
  Mooncake-style hash ids shared by the group, so vLLM's prefix cache hits them as it did;
- a finite prompt set (inference-perf's ``shared_prefix``: ``num_groups x num_prompts_per_group``
  prompts made once, shuffled, then sent in that order again and again): each distinct prompt
  has one length and one set of blocks, so a repeat hits the whole prompt in the cache (less its
  last partial block), as vLLM's prefix cache served the benchmark;
- a stage that drains (``vllm bench serve``, ``Stage.drains``): its own count of prompts, the
  first at once and gamma gaps of shape ``burstiness`` after it (all at once at an infinite
  rate), each request's own lengths when the run saved them; every request is measured, as the
  client measured every answer;
- a ``--max-concurrency N`` run (``calibration.bench_serve.closed_loop_of``): the same requests
  in order through kvsim's closed loop of N (``sim.run.clients``): each sent when a slot frees
  (the last chunk reaches its client through the API server), not before its rate time. A
  request's engine arrival is its ingress's end.

:func:`replay_stages` is the one path of both ``kvsim calibrate check`` and ``calibrate fit
--from``, so a fitted profile is checked exactly as it was fitted. A stack named by a YAML file is
read afresh on every replay: a fit rewrites its profile between replays, and the per-process cost
cache (``sim/run/static.py``) keys a serving stack by its name only.

:func:`replay` runs the stage with the serving stack given (a name or a profile YAML) and also
records, per step, the stack's inputs (kernel time, sequences, a prefill flag), so the fit can
move the stack's coefficients along the measured schedule (``calibration/v1_fit.py``): a request's
gradient sums the steps after its engine arrival (its ingress's end; without an API server, a
closed loop's send: the end of the step that freed its slot, which is not its own) up to its
first token / finish.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import simpy

from calibration.bench_serve import closed_loop_of
from calibration.serving_runs import Stage
from sim.config.schema import SimConfig, make_config
from sim.cost.batch import CostBasis, StepBatch, basis_of
from sim.cost.for_config import cost_model_for
from sim.frontend.stage import FrontEnd, enter, leave, step_ends
from sim.io.ingest import make_requests
from sim.io.results import request_frame
from sim.memory.budget import model_for
from sim.model.catalog import resolve_model
from sim.run.build import build, new_replica
from sim.run.clients import ClientSpec, closed_loop
from workloads.schema import Trace, validate

BLOCK = 16
DEFAULT_WINDOW_S = 150.0    # seconds of an inference-perf stage replayed (its steady state)
WARMUP_FRACTION = 0.1       # requests of the first 10 % of the window are not measured (empty server)
OVERLOAD_WAIT_S = 2.0       # mean queueing delay of the last quarter of arrivals above this: overloaded
SAME_TIME_S = 1e-9          # a send at a step's end (a closed loop's) comes after that step, not in it
# d step_time / d (eta, eta_tok, eta_attn, cpu_s, per_seq_s, prefill_s): token-independent kernel
# time, token-dependent dense time, attention time, 1, sequences, 1 if the step prefills
FEATURES = ("kernel_fixed", "kernel_dense", "kernel_attention", "step", "seq", "prefill")


def _inverse_cdf(q: tuple[tuple[float, float], ...], u: np.ndarray) -> np.ndarray:
    qs, vs = np.array([a for a, _ in q]), np.array([b for _, b in q])
    return np.interp(u, qs, vs)


def _drain_trace(st: Stage, rng: np.random.Generator, window_s: float | None) -> Trace:
    """A ``vllm bench serve`` run: its prompts sent open loop, the first at once."""
    n = len(st.lens) or st.ok
    if math.isinf(st.rate):
        arrival = np.zeros(n)
    else:
        arrival = np.r_[0.0, np.cumsum(rng.gamma(st.burstiness, 1.0 / (st.rate * st.burstiness), n - 1))]
    if st.lens:
        prompt, out = (np.array(c, dtype=np.int64) for c in zip(*st.lens, strict=True))
    else:
        prompt = np.maximum(1, np.rint(_inverse_cdf(st.prompt_q, rng.random(n)))).astype(np.int64)
        out = np.maximum(1, np.rint(_inverse_cdf(st.output_q, rng.random(n)))).astype(np.int64)
    keep = slice(None) if window_s is None else slice(0, max(1, int(np.searchsorted(arrival, window_s, "right"))))
    df = pd.DataFrame(dict(arrival_s=arrival[keep], prompt_tokens=prompt[keep], output_tokens=out[keep]))
    return Trace(validate(df, st.key), st.key, "replay")


def stage_trace(st: Stage, rng: np.random.Generator, window_s: float | None = None,
                outputs: str = "auto") -> Trace:
    if st.drains:
        return _drain_trace(st, rng, window_s)
    dur = st.duration_s if window_s is None else min(st.duration_s, window_s)
    n = max(1, round(st.rate * dur))
    if st.arrival == "constant":
        arrival = np.arange(n) / st.rate
    else:
        arrival = np.cumsum(rng.exponential(1.0 / st.rate, n)) - 0.0
    if st.groups > 0 and st.prompts_per_group > 0:
        return _cycled_trace(st, rng, arrival, outputs)
    prompt = np.maximum(1, np.rint(_inverse_cdf(st.prompt_q, rng.random(n)))).astype(np.int64)
    out = _outputs(st, rng, n, outputs)
    cols: dict[str, Any] = dict(arrival_s=arrival, prompt_tokens=prompt, output_tokens=out)
    if st.groups > 0 and st.system_prompt_len >= BLOCK:
        grp = rng.integers(0, st.groups, n)
        shared = st.system_prompt_len // BLOCK
        cols["hash_ids"] = [prompt_blocks(int(g), i, int(p), shared)
                            for i, (g, p) in enumerate(zip(grp, prompt, strict=True))]
        cols["tokens_per_hash"] = BLOCK
    return Trace(validate(pd.DataFrame(cols), st.key), st.key, "replay")


def prompt_blocks(group: int, prompt: int, tokens: int, shared: int) -> list[int]:
    """Mooncake-style hash ids of a prompt of ``tokens`` tokens: its first ``shared`` blocks its
    group's system prompt (shared by the group), the rest its own (``prompt``: which one)."""
    n = -(-tokens // BLOCK)
    return [group * 1_000 + b for b in range(min(shared, n))] + \
        [1_000_000 + prompt * 4_096 + b for b in range(max(0, n - shared))]


def _outputs(st: Stage, rng: np.random.Generator, n: int, outputs: str) -> np.ndarray:
    if outputs in ("auto", "requested") and st.ignore_eos and st.requested_output:
        return np.full(n, st.requested_output, dtype=np.int64)
    return np.maximum(1, np.rint(_inverse_cdf(st.output_q, rng.random(n)))).astype(np.int64)


def _cycled_trace(st: Stage, rng: np.random.Generator, arrival: np.ndarray, outputs: str) -> Trace:
    """inference-perf's ``shared_prefix`` set: ``groups x prompts_per_group`` prompts, each a group's
    system prompt and its own question, made once and shuffled; request i sends prompt i mod K."""
    k = st.groups * st.prompts_per_group
    plen = np.maximum(1, np.rint(_inverse_cdf(st.prompt_q, rng.random(k)))).astype(np.int64)
    order = rng.permutation(k)
    shared = st.system_prompt_len // BLOCK
    ids = [prompt_blocks(j // st.prompts_per_group, j, int(plen[j]), shared) for j in range(k)]
    sent = order[np.arange(len(arrival)) % k]
    cols: dict[str, Any] = dict(arrival_s=arrival, prompt_tokens=plen[sent],
                                output_tokens=_outputs(st, rng, len(arrival), outputs),
                                hash_ids=[ids[j] for j in sent], tokens_per_hash=BLOCK)
    return Trace(validate(pd.DataFrame(cols), st.key), st.key, "replay")


def stage_config(st: Stage, stack: str, **kw: Any) -> SimConfig:
    e = st.engine
    return make_config(where=st.key, model=st.model, gpu=st.gpu, tensor_parallel_size=st.tp,
                       max_num_batched_tokens=e.get("max_num_batched_tokens"), max_num_seqs=e.get("max_num_seqs"),
                       max_model_len=e.get("max_model_len"), gpu_memory_utilization=0.9, serving_stack=stack,
                       block_size=BLOCK, **kw)


class Recorder:
    """A StepCostModel that times with ``inner`` and keeps each step's stack inputs."""

    __slots__ = ("inner", "rows")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.rows: list[tuple[float, ...]] = []

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def basis(self) -> CostBasis:
        return basis_of(self.inner)

    def step_time(self, batch: StepBatch) -> float:
        t = float(self.inner.step_time(batch))
        # busy time = eta f + eta_tok d + eta_attn a + held: the parts held at their physics floor
        # do not move with the stack's multipliers (CalibratedCost.stack_parts)
        f, d, a, floor = self.inner.stack_parts(batch)
        busy = 1.0 if batch.num_tokens else 0.0
        self.rows.append((f, d, a, busy, float(batch.num_seqs) * busy, 1.0 if batch.prefill_tokens else 0.0, floor))
        return t


@dataclass(frozen=True, slots=True)
class StageResult:
    stage: Stage
    e2e_mean: float
    ttft_mean: float
    out_mean: float
    overloaded: bool
    wait_last_s: float
    grad_e2e: np.ndarray          # d mean E2E / d FEATURES' coefficients, schedule held
    grad_ttft: np.ndarray
    n: int
    unfinished: int

    @property
    def dtpt(self) -> float:
        return (self.e2e_mean - self.ttft_mean) / max(1.0, self.out_mean - 1)


def replay(st: Stage, stack: str, *, seed: int = 0, window_s: float | None = 150.0, outputs: str = "auto",
           **cfg_kw: Any) -> StageResult:
    slots = closed_loop_of(st.arrival)
    cfg = stage_config(st, stack, seed=seed, **cfg_kw)
    trace = stage_trace(st, np.random.default_rng(seed), window_s, outputs)
    parts = build(cfg)
    if stack.endswith((".yaml", ".yml")):  # read the file now, not a cost model cached under its name
        parts = parts._replace(cost=cost_model_for(cfg, model_for(cfg, resolve_model(cfg.model))))
    rec = Recorder(parts.cost)
    parts = parts._replace(cost=rec)
    reqs = make_requests(trace, cfg)
    fe = FrontEnd.of(cfg)  # the API server, as simulate runs it: the client's times are measured
    loop = closed_loop(ClientSpec(slots), trace, reqs, fe) if slots is not None else None
    ing, inbox = enter(reqs, fe) if fe is not None and loop is None else (None, reqs)
    env = simpy.Environment()
    rep = new_replica(env, cfg, parts=parts)
    if loop is not None:
        loop.feed(rep)  # sets each later request's arrival_s to its send time as the run goes
    else:
        rep.submit_all(inbox)
    env.run()
    eng = request_frame(reqs)  # the engine's own times: the steps between them move with the stack
    steps = rep.log.frame()
    ends = step_ends(steps)
    if loop is not None and loop.live is not None:
        loop.live.columns()
    elif fe is not None and ing is not None:
        leave(reqs, fe, ing, [ends])
    q = request_frame(reqs)
    feats = np.asarray(rec.rows, dtype=np.float64).reshape(-1, len(FEATURES) + 1)[:, :len(FEATURES)]
    if len(feats) != len(ends):  # every step is timed once; keep the fit honest if that ever changes
        raise RuntimeError(f"{st.key}: {len(feats)} timed steps vs {len(ends)} logged")
    cum = np.vstack([np.zeros((1, feats.shape[1])), np.cumsum(feats, axis=0)])
    t_end = float(trace.df["arrival_s"].max())
    done = q[q["status"] == "finished"] if "status" in q else q
    meas = done if st.drains else done[done["arrival_s"] >= WARMUP_FRACTION * t_end]
    e = eng.loc[meas.index]
    lo = np.searchsorted(ends, e["arrival_s"].to_numpy() + SAME_TIME_S, "right")
    g_e2e = (cum[np.searchsorted(ends, e["finish_s"].to_numpy() - 1e-12, "right") + 1] - cum[lo]).mean(axis=0) \
        if len(meas) else np.zeros(len(FEATURES))
    g_ttft = (cum[np.searchsorted(ends, e["first_token_s"].to_numpy() - 1e-12, "right") + 1] - cum[lo]).mean(axis=0) \
        if len(meas) else np.zeros(len(FEATURES))
    last = q[q["arrival_s"] >= 0.75 * t_end]
    wait = float((last["first_scheduled_s"] - last["arrival_s"]).fillna(math.inf).mean()) if len(last) else 0.0
    unfinished = int(len(q) - len(done))
    # a run that drains has no time-outs: it is overloaded only if requests never finish
    over = unfinished > 0.01 * len(q) if st.drains else wait > OVERLOAD_WAIT_S or unfinished > 0
    return StageResult(st, float(meas["e2e_s"].mean()), float(meas["ttft_s"].mean()),
                       float(meas["output_tokens"].mean()), over, wait, g_e2e, g_ttft, len(meas), unfinished)


def stage_window(st: Stage, window_s: float | None) -> float | None:
    """The replay window of ``st``: the caller's, else all of a run that drains (its means cover
    every request) and DEFAULT_WINDOW_S of an inference-perf stage (steady state)."""
    return window_s if window_s is not None else (None if st.drains else DEFAULT_WINDOW_S)


def replay_stages(stages: Sequence[Stage], stack: str, *, window_s: float | None = None,
                  seed: int = 0) -> list[StageResult]:
    """Every stage replayed under ``stack``: the one path of ``calibrate check`` and ``fit --from``."""
    return [replay(s, stack, seed=seed, window_s=stage_window(s, window_s)) for s in stages]
