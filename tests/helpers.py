"""Shared test helpers: one definition each, imported by the specification tests.

- :func:`req`                           a bare :class:`Request` (prompt, output, content ids)
- :func:`assert_fast_forward_identical` the bulk path vs ``--exact-steps``, frame by frame
- :func:`mooncake_slice`                the bundled Mooncake slice (prefix hashes), trimmed
- :func:`conv_slice`                    the bundled Azure conv slice's first requests, arrivals sped up
- :func:`optional_data`                 a large optional file under ``KVSIM_DATA``, or a skip
- :func:`bench_module`                  a script of ``bench/``, imported as a module
- :func:`require_built`                 skip, with the reason, where a compiled loop is not in use
- :func:`as_python`                     a Cython-compiled module, imported once more from its .py
- :func:`same_either_way`               a simulation with a compiled loop and with its Python: identical
- :func:`a_run`                         a laid-out run of quiet steps (random times and pops)
- :func:`known_stack`                   a serving-stack profile YAML with the coefficients given
- :func:`vllm_bench_result`             a `vllm bench serve --save-result` object, simulated by kvsim
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

from sim.request import Request

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "workloads" / "data" / "azure_conv_slice.csv"
MOONCAKE_SLICE = REPO / "workloads" / "data" / "mooncake_conv_slice.jsonl"


def bench_module(name: str) -> ModuleType:
    """``bench/NAME.py`` as a module (the benches import each other by bare name)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


def as_python(module: ModuleType) -> ModuleType:
    """``module`` (compiled by Cython from its ``.py``: ``setup.py``) imported once more from that
    ``.py``, under another name: the same source as Python, to check that the build kept its
    floats (no fused multiply-add) and its integers. Skips, with the reason, where ``module``
    was not compiled (then it is that Python already)."""
    import importlib.util

    from sim.compiled import is_compiled

    if not is_compiled(module):
        pytest.skip(f"{module.__name__} is not compiled here (no build, or KVSIM_PURE_PYTHON set)")
    src = Path(module.__file__ or "").with_name(module.__name__.rpartition(".")[2] + ".py")
    spec = importlib.util.spec_from_file_location(module.__name__ + "_as_python", src)
    assert spec is not None and spec.loader is not None
    out = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(out)
    return out


def same_either_way(monkeypatch: pytest.MonkeyPatch, switch: tuple[ModuleType, str],
                    loops: Callable[[str], ModuleType | None], trace: Any, **cfg: Any) -> tuple[Any, list[Any]]:
    """Simulate ``trace`` with the compiled loops (``loops("compiled")`` set as ``switch``, a
    module and its attribute) and with the Python ones: the requests, the steps and the tables
    freed must be identical. Returns the compiled run and its freed tables."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    runs = []
    for which in ("compiled", "python"):
        monkeypatch.setattr(*switch, loops(which))
        runs.append(freed_tables(lambda: simulate(make_config(**cfg), trace, check=True)))
    (compiled, c_tables), (python, p_tables) = runs
    pd.testing.assert_frame_equal(compiled.requests, python.requests, check_exact=True)
    pd.testing.assert_frame_equal(compiled.steps, python.steps, check_exact=True)
    assert c_tables == p_tables, "the same requests freed other blocks"
    return compiled, c_tables


def require_built(loop: object, source: str) -> None:
    """Skip the test, with the reason, when ``loop`` (a module's compiled-loop attribute) is None."""
    if loop is None:
        pytest.skip(f"the compiled loop of {source} is not in use: not built (no C compiler at install) "
                    "or KVSIM_PURE_PYTHON is set")


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
    must be identical, and so must the block ids each paged table holds when it is freed.
    Returns the fast-forward result."""
    from sim.config import make_config
    from sim.run.simulate import simulate

    ff, ff_tables = freed_tables(lambda: simulate(make_config(**{**cfg_kw, "exact_steps": False}), trace,
                                                  check=check))
    ex, ex_tables = freed_tables(lambda: simulate(make_config(**{**cfg_kw, "exact_steps": True}), trace,
                                                  check=check))
    if expect_ff:
        assert ff.summary.fast_forward_steps > 0, "no step was fast-forwarded: the test proves nothing"
    pd.testing.assert_frame_equal(ff.requests, ex.requests, check_exact=True)
    pd.testing.assert_frame_equal(ff.steps, ex.steps, check_exact=True)
    assert ff_tables == ex_tables, "the same requests freed other blocks"
    assert ff.summary.busy_fraction == ex.summary.busy_fraction, "busy time: not the same float sums"
    return ff


def freed_tables(run: Callable[[], Any]) -> tuple[Any, list[tuple[int, tuple[int, ...]]]]:
    """``run()``, and each paged table as it was freed: (request uid, its block ids), in order."""
    from sim.kv.paged import PagedAllocator

    seen: list[tuple[int, tuple[int, ...]]] = []
    free = PagedAllocator.free

    def spy(self: PagedAllocator, req: Any) -> None:
        if req.kv is not None:
            seen.append((req.uid, tuple(req.kv.blocks)))
        free(self, req)

    PagedAllocator.free = spy  # type: ignore[method-assign]
    try:
        return run(), seen
    finally:
        PagedAllocator.free = free  # type: ignore[method-assign]


def mooncake_slice(n: int = 80, max_prompt: int = 8000) -> Any:
    """The first ``n`` requests under ``max_prompt`` tokens of the bundled Mooncake slice."""
    from tests.conftest import make_trace
    from workloads import load_trace

    tr = load_trace(MOONCAKE_SLICE)
    df = tr.df[tr.df["prompt_tokens"] < max_prompt].head(n).reset_index(drop=True)
    return make_trace(df.to_dict("records"))


def conv_slice(n: int, speed: float = 1.0) -> Any:
    """The first ``n`` requests of the bundled Azure conv slice, arriving ``speed`` times as fast."""
    from workloads import load_trace

    trace = load_trace(BUNDLED)
    df = trace.df.iloc[:n].copy()
    df["arrival_s"] = df["arrival_s"] / speed
    return type(trace)(df=df.reset_index(drop=True), path=trace.path, format=trace.format)


def optional_data(*parts: str) -> Path:
    """``$KVSIM_DATA/<parts>``, or skip the test with the reason (large data is not shipped)."""
    root = os.environ.get("KVSIM_DATA")
    if not root:
        pytest.skip(f"optional data {'/'.join(parts)}: set KVSIM_DATA to the folder that holds it")
    path = Path(root).joinpath(*parts)
    if not path.exists():
        pytest.skip(f"optional data {path} not found (KVSIM_DATA={root})")
    return path


# ---- one op-driver over every allocator (tests/test_kv_contract.py) ------------------------------
#: the four allocator configurations the KV contract is specified against
KV_KINDS = ("paged", "slab", "hybrid", "paged+offload")


def make_kv(kind: str, num_blocks: int = 17, block_size: int = 4, *, cpu_blocks: int = 6) -> Any:
    """A small pool of each kind: ``num_blocks`` blocks of ``block_size`` slots (a slab: the
    same slots, one contiguous region); hybrid: one full-attention and one sliding-window group
    (window 2 blocks); paged+offload: a CPU tier of ``cpu_blocks`` blocks as its KV connector."""
    from sim.kv.coordinator import HybridAllocator
    from sim.kv.offload import OffloadConnector
    from sim.kv.paged import PagedAllocator
    from sim.kv.slab import SlabAllocator
    from sim.kv.window import KvGroup

    if kind == "slab":
        slots = (num_blocks - 1) * block_size
        return SlabAllocator(slots, max_model_len=slots, reservation="oracle", placement="buddy")
    if kind == "hybrid":
        return HybridAllocator(num_blocks, block_size, (KvGroup(), KvGroup("sliding_window", 2 * block_size)))
    kv = PagedAllocator(num_blocks, block_size)
    if kind == "paged+offload":
        kv.connect(OffloadConnector(kv, cpu_blocks))
    elif kind != "paged":
        raise ValueError(f"unknown allocator kind {kind!r}")
    return kv


OPS, OP_WEIGHTS = ("new", "admit", "grow", "preempt"), (0.25, 0.25, 0.44, 0.06)


def drive_kv(kv: Any, rng: Any, num_ops: int = 300, *, prefixes: int = 3,
             blocks_of: Any = None) -> list[tuple[Any, ...]]:
    """Random admit / grow / preempt / finish operations through ``kv`` (and its KV connector),
    in the order the scheduler makes the calls, checking the contract's invariants after every
    operation; at the end everything is freed and nothing may leak.

    Invariants: ``kv.check(live)`` (ref counts equal the tables' references, blocks conserved,
    the free queue and the hash map consistent), the breakdown sums to the pool with no negative
    category, free blocks within ``0..usable_blocks``. ``rng``: a seeded numpy Generator.
    Returns the decisions taken, ``(op, uid, outcome, free blocks, evictions[, blocks])``
    (``blocks_of(req)``: the block ids to record), for comparing two allocators.
    """
    from sim.request import Status
    from sim.sched.admission import Admission
    from sim.sched.transfers import probe

    B, conn, adm = kv.block_size, kv.connector, Admission()
    pool_slots = kv.num_blocks * B
    waiting: list[Request] = []
    live: list[Request] = []
    log: list[tuple[Any, ...]] = []
    uid = 0

    def check(op: str, r: Request, outcome: object) -> None:
        kv.check(live)
        mem = kv.breakdown(live, sum(q.num_computed_tokens for q in live))
        assert sum(mem) == pool_slots and min(mem) >= 0, (op, mem)
        assert 0 <= kv.num_free_blocks <= kv.usable_blocks and kv.shared_excess >= 0
        row = (op, r.uid, outcome, kv.num_free_blocks, kv.evictions)
        log.append(row + ((tuple(blocks_of(r)),) if blocks_of is not None else ()))

    def sample(r: Request) -> bool:
        """All known tokens computed: sample one; True when that was the last."""
        if r.num_computed_tokens < r.num_tokens:
            return False
        r.num_output += 1
        r.num_tokens += 1
        return r.num_output >= r.output_tokens

    def finish(r: Request) -> None:
        live.remove(r)
        if conn is not None:
            assert conn.request_finished(r, kv.num_held_blocks(r)) == (False, None)
        kv.free(r)
        r.status = Status.FINISHED

    for _ in range(num_ops):
        op = OPS[int(rng.choice(len(OPS), p=OP_WEIGHTS))]
        if op == "new" or not (waiting or live):
            p = int(rng.integers(1, 6 * B))
            base = int(rng.integers(prefixes)) * 1000 if rng.random() < 0.7 else None
            own = 10**6 + uid * 100                          # the rest of the prompt is the request's own
            ids = None if base is None else (*range(base, base + p // 2), *range(own, own + p - p // 2))
            waiting.append(req(uid, p, int(rng.integers(1, 3 * B)), ids=ids))
            uid += 1
            continue
        if op == "admit" and waiting:
            r = waiting[0]
            if kv.never_fits(r):
                waiting.pop(0)
                continue
            hit = probe(kv, conn, r)
            n = min(r.num_tokens - hit.tokens, int(rng.integers(1, 4 * B)))
            ok = adm.admit(kv, r, n + hit.external_tokens, hit.blocks, bool(live))
            if ok:
                if conn is not None:
                    conn.update_state_after_alloc(r, kv.num_held_blocks(r), hit.external_tokens)
                waiting.pop(0)
                r.status, r.num_computed_tokens = Status.RUNNING, hit.tokens + n
                live.append(r)
            else:
                assert kv.num_held_blocks(r) == 0
            check("admit", r, (ok, hit.tokens))
            if ok and sample(r):
                finish(r)
                check("finish", r, True)
        elif op == "grow" and live:
            r = live[int(rng.integers(len(live)))]
            n = min(r.num_tokens - r.num_computed_tokens, int(rng.integers(1, 2 * B)))
            ok = kv.allocate(r, n)
            if ok:
                r.num_computed_tokens += n
            check("grow", r, ok)
            if ok and sample(r):
                finish(r)
                check("finish", r, True)
        elif op == "preempt" and live:
            r = live.pop(int(rng.integers(len(live))))
            kv.free(r)
            r.status, r.num_computed_tokens = Status.PREEMPTED, 0
            r.num_preemptions += 1
            waiting.insert(0, r)
            check("preempt", r, True)
    for r in list(live):
        finish(r)
    kv.check([])
    assert kv.num_free_blocks == kv.usable_blocks, "blocks leaked"
    return log


def a_run(lag: int, first_step: int, H: int, seed: int) -> Any:
    """A run of ``H`` quiet steps as :class:`RunRows` (3 decoders, random step times and pops)."""
    import numpy as np

    from sim.engine.fastforward.run_records import RunRows, RunShape

    rng = np.random.default_rng(seed)
    sh = RunShape(first_step=first_step, lag=lag, block_size=16, free0=900, usable=1000, nulls=16,
                  decoders=3, num_waiting=2, num_running=4, shared=5)
    dt = rng.random(H) / 100
    ends = np.concatenate([[6.5, 7.0], 7.0 + np.cumsum(dt)])   # the step in flight's start, T[0], T[1] ...
    dts = np.concatenate([[0.5], dt])                          # the step in flight's duration, dt_1 ...
    ctx = 3 * np.arange(1, H + 1) + 4000
    cum = np.cumsum(rng.integers(0, 2, H))
    return RunRows(sh, ends, dts, ctx, cum)


CPU_S, PER_SEQ_S, PREFILL_S = 1.86e-3, 6.25e-7, 8.7e-4  # a V1 engine's host terms (an earlier vllm-v1 fit)


def known_stack(path: Path, *, eta: float = 1.1, eta_tok: float = 1.3, eta_attn: float = 1.15, cpu_x: float = 2.0,
                per_seq_x: float = 3.0, prefill_x: float = 1.0) -> Path:
    """A physical serving stack (kernel multipliers as given, over the committed vllm-v1's kernel
    basis) whose host terms are CPU_S, PER_SEQ_S, PREFILL_S times ``cpu_x`` / ``per_seq_x`` /
    ``prefill_x``: the truth a fit should recover."""
    import yaml

    from sim.cost.stack import SCHEMA, committed_stacks

    v1 = committed_stacks()["vllm-v1"]
    coef = {"launch_s": v1.launch_s, "per_seq_s": PER_SEQ_S * per_seq_x, "prefill_s": PREFILL_S * prefill_x,
            "prefill_n2_s": 0.0, "eta_tok": eta_tok, "eta_attn": eta_attn, "sched_s": v1.sched_s,
            "sched_per_seq_s": v1.sched_per_seq_s}
    entry = {"description": "known", "engine": "test", "cuda_graphs": True, "kernels": v1.kernels, "fitted_on": {}, "coef": coef,
             "by_tp": {1: {"cpu_s": CPU_S * cpu_x, "eta": eta}}}
    path.write_text(yaml.safe_dump({"schema": SCHEMA, "stacks": {"known": entry}}))
    return path


def vllm_bench_result(stack: Path, rate: float, n: int, seed: int, *, model_id: str = "meta-llama/Llama-3.1-8B-Instruct",
                      detailed: bool = True) -> dict[str, Any]:
    """What `vllm bench serve --save-result [--save-detailed]` writes, for a run simulated by kvsim
    under ``stack``: ``n`` prompts (300-1200 tokens, 60-260 out), the first at once and Poisson
    gaps after it, on one H100. Per-token times are not simulated: ``itls`` repeat each
    request's mean decode time."""
    import time

    import numpy as np
    import simpy

    from sim.config.schema import make_config
    from sim.io.ingest import make_requests
    from sim.io.results import request_frame
    from sim.run.build import new_replica
    from workloads.schema import Trace, validate

    rng = np.random.default_rng(seed)
    arrival = np.r_[0.0, np.cumsum(rng.exponential(1.0 / rate, n - 1))]
    p, o = rng.integers(300, 1200, n), rng.integers(60, 260, n)
    df = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": p, "output_tokens": o})
    cfg = make_config(model=model_id, gpu="h100", serving_stack=str(stack), seed=seed)
    reqs = make_requests(Trace(validate(df, "bench"), "bench", "synthetic"), cfg)
    env = simpy.Environment()
    replica = new_replica(env, cfg)
    replica.submit_all(reqs)
    env.run()
    q = request_frame(reqs)
    ttft, e2e, out = (q[c].to_numpy(float) for c in ("ttft_s", "e2e_s", "output_tokens"))
    tpot, dur = (e2e - ttft) / np.maximum(1, out - 1), float(q["finish_s"].max())
    d: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S"), "backend": "vllm", "model_id": model_id, "tokenizer_id": model_id,
        "num_prompts": n, "request_rate": rate, "burstiness": 1.0, "max_concurrency": None, "duration": dur,
        "completed": len(q), "total_input_tokens": int(p.sum()), "total_output_tokens": int(out.sum()),
        "request_throughput": len(q) / dur, "output_throughput": out.sum() / dur,
        "total_token_throughput": (out.sum() + p.sum()) / dur}
    for name, x in (("ttft", ttft), ("tpot", tpot), ("itl", tpot), ("e2el", e2e)):
        d.update({f"mean_{name}_ms": x.mean() * 1e3, f"median_{name}_ms": float(np.median(x)) * 1e3,
                  f"std_{name}_ms": x.std() * 1e3, f"p99_{name}_ms": float(np.percentile(x, 99)) * 1e3})
    if detailed:
        d.update(input_lens=p.tolist(), output_lens=out.astype(int).tolist(), ttfts=ttft.tolist(),
                 itls=[[float(t)] * int(k - 1) for t, k in zip(tpot, out, strict=True)])
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in d.items()}


def assert_ff_identical_closed_loop(cfg_kw: dict[str, Any], trace: Any, max_concurrency: int | None,
                                    check: bool = False) -> Any:
    """:func:`assert_fast_forward_identical` for a closed-loop run (``--max-concurrency``, or a
    session trace with None): requests, steps and freed tables equal with and without fast-forward."""
    from sim.config import make_config
    from sim.run.clients import ClientSpec
    from sim.run.simulate import simulate

    def run(exact: bool) -> Any:
        cfg = make_config(**{**cfg_kw, "exact_steps": exact})
        return simulate(cfg, trace, clients=ClientSpec(max_concurrency), check=check)

    (ff, ff_tables), (ex, ex_tables) = freed_tables(lambda: run(False)), freed_tables(lambda: run(True))
    assert ff.summary.fast_forward_steps > 0, "no step was fast-forwarded: the test proves nothing"
    pd.testing.assert_frame_equal(ff.requests, ex.requests, check_exact=True)
    pd.testing.assert_frame_equal(ff.steps, ex.steps, check_exact=True)
    assert ff_tables == ex_tables, "the same requests freed other blocks"
    return ff


def vllm_bench_closed_loop(stack: Path, n: int, concurrency: int, seed: int, *,
                           model_id: str = "meta-llama/Llama-3.1-8B-Instruct") -> dict[str, Any]:
    """What `vllm bench serve --max-concurrency N --request-rate inf --save-result --save-detailed`
    writes, for a run simulated by kvsim under ``stack`` with its own closed loop of N clients behind
    one API server (``n`` prompts of 300-1200 tokens, 60-260 out, in order, on one H100)."""
    import time

    import numpy as np

    from sim.config.schema import make_config
    from sim.run.clients import ClientSpec
    from sim.run.simulate import simulate
    from workloads.schema import Trace, validate

    rng = np.random.default_rng(seed)
    p, o = rng.integers(300, 1200, n), rng.integers(60, 260, n)
    df = pd.DataFrame({"arrival_s": np.zeros(n), "prompt_tokens": p, "output_tokens": o})
    cfg = make_config(model=model_id, gpu="h100", serving_stack=str(stack), seed=seed)
    q = simulate(cfg, Trace(validate(df, "bench"), "bench", "synthetic"), clients=ClientSpec(concurrency)).requests  # uid = send order
    ttft, e2e, out = (q[c].to_numpy(float) for c in ("ttft_s", "e2e_s", "output_tokens"))
    dur = float(q["finish_s"].max())
    d: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S"), "backend": "vllm", "model_id": model_id, "tokenizer_id": model_id,
        "num_prompts": n, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": concurrency, "duration": dur,
        "completed": len(q), "total_input_tokens": int(p.sum()), "total_output_tokens": int(out.sum()),
        "request_throughput": len(q) / dur, "input_lens": p.tolist(), "output_lens": out.astype(int).tolist()}
    tpot = (e2e - ttft) / np.maximum(1, out - 1)
    for name, x in (("ttft", ttft), ("tpot", tpot), ("e2el", e2e)):
        d.update({f"mean_{name}_ms": float(x.mean()) * 1e3, f"median_{name}_ms": float(np.median(x)) * 1e3})
    return d


# ---- closed-loop clients (tests/test_closed_loop*.py, test_cluster_clients.py) -----------------
def in_flight(req: pd.DataFrame) -> Any:
    """Requests in flight after each send or finish ([send, finish): a finish at t frees first)."""
    import numpy as np

    t = np.concatenate((req["arrival_s"], req["finish_s"]))
    d = np.concatenate((np.ones(len(req)), -np.ones(len(req))))
    order = np.lexsort((d, t))
    return np.cumsum(d[order])


def session_trace(seed: int = 3, sessions: int = 14) -> Any:
    """A generated multi-turn trace (think times: a closed loop; turns share their prefixes)."""
    import numpy as np

    from tests.conftest import make_trace
    from workloads.sessions import generate_sessions, parse_sessions

    sp = parse_sessions({"sessions": sessions, "start_rate": 4.0, "turns": {"kind": "uniform", "low": 2, "high": 4},
                         "new_tokens": {"kind": "uniform", "low": 20, "high": 300},
                         "output": {"kind": "uniform", "low": 10, "high": 120},
                         "think_time_s": {"mean": 0.3, "cv": 1.0}, "max_model_len": 4096})
    return make_trace(generate_sessions(sp, np.random.default_rng(seed)).to_dict("records"))


def kvsim(*args: str) -> tuple[int, str]:
    """(exit code, output) of ``kvsim ARGS`` in process; a traceback fails the test."""
    from typer.testing import CliRunner

    from sim.cli.main import _load, app

    _load()
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception  # no traceback
    return res.exit_code, res.output


def write_sessions(path: Path) -> None:
    from workloads.writer import write_trace

    write_trace(session_trace(sessions=3).df, path)
