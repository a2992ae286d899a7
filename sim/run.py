"""Build a simulation from a config and a trace, run it, and collect flat results.

    result = simulate(cfg, trace)
    result.requests   # one row per request (pandas)
    result.steps      # one row per engine step
    result.summary    # dict, also written as summary.json
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import simpy

from sim import __version__
from sim.budget import KvBudget, compute_budget
from sim.config import SimConfig
from sim.cost import StepCostModel, build_cost_model
from sim.engine import Replica
from sim.errors import ConfigError
from sim.kv.paged import PagedAllocator, cdiv
from sim.kv.slab import SlabAllocator
from sim.request import Request, Status
from sim.sched.policies import VICTIMS
from sim.sched.scheduler import Scheduler
from sim.specs import resolve_gpu, resolve_model
from workloads.schema import Trace

REQUEST_COLUMNS = (
    "request_id", "arrival_s", "prompt_tokens", "output_tokens", "status", "reject_reason",
    "first_scheduled_s", "first_token_s", "finish_s", "first_scheduled_step", "finish_step",
    "num_preemptions", "prefix_hit_tokens", "ttft_s", "tpot_s", "e2e_s", "parent_id",
)


@dataclass
class SimResult:
    config: SimConfig
    budget: KvBudget
    cost_model: str
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict[str, Any]

    def write(self, out: Path) -> dict[str, float]:
        """Write requests.parquet, steps.parquet and summary.json under ``out``."""
        t0 = time.perf_counter()
        out.mkdir(parents=True, exist_ok=True)
        self.requests.to_parquet(out / "requests.parquet", index=False)
        self.steps.to_parquet(out / "steps.parquet", index=False)
        self.summary["timings"]["write_s"] = round(time.perf_counter() - t0, 4)
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=_json_default))
        return self.summary["timings"]


def _json_default(o: object) -> object:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    raise TypeError(type(o))


# ---- building ------------------------------------------------------------------------------------
def make_requests(trace: Trace, cfg: SimConfig) -> list[Request]:
    """Trace rows -> Requests. ``n``/``beam_width`` > 1 fan out into sibling requests (V1)."""
    df = trace.df
    arrival = df["arrival_s"].to_numpy(np.float64).tolist()
    prompt = df["prompt_tokens"].to_numpy(np.int64).tolist()
    output = df["output_tokens"].to_numpy(np.int64).tolist()
    rid = df["request_id"].astype(str).tolist()
    prio = df["priority"].to_numpy(np.int64).tolist() if "priority" in df else None
    nsamp = df["n"].to_numpy(np.int64).tolist() if "n" in df else None
    beam = df["beam_width"].to_numpy(np.int64).tolist() if "beam_width" in df else None
    ids = df["prompt_token_ids"].tolist() if "prompt_token_ids" in df else None
    hids = df["hash_ids"].tolist() if "hash_ids" in df else None
    tph = df["tokens_per_hash"].to_numpy(np.int64).tolist() if "tokens_per_hash" in df else None
    caching = bool(cfg.resolved("enable_prefix_caching"))
    fork = cfg.resolved("sharing") == "fork-cow" and cfg.allocator == "paged"
    out: list[Request] = []
    for i in range(len(arrival)):
        content: object = None
        if caching:
            if ids is not None and isinstance(ids[i], (list, tuple, np.ndarray)):
                content = ("ids", tuple(int(x) for x in ids[i]))
            elif hids is not None and isinstance(hids[i], (list, tuple, np.ndarray)) and len(hids[i]):
                content = ("hash", tuple(int(x) for x in hids[i]), int(tph[i]) if tph else 512)
        width = beam[i] if beam else 1
        fan = max(nsamp[i] if nsamp else 1, width)
        if fan > 1 and content is None and caching:
            content = ("shared", i)
        parent = len(out) if fan > 1 else -1
        group: list[Request] | None = [] if fork and fan > 1 else None
        for k in range(fan):
            r = Request(
                uid=len(out), request_id=rid[i] if fan == 1 else f"{rid[i]}#{k}",
                arrival_s=arrival[i], prompt_tokens=prompt[i], output_tokens=output[i],
                priority=prio[i] if prio else 0, content=content, parent=parent,
                group=group, beam=group is not None and width > 1)
            if group is not None:
                group.append(r)
            out.append(r)
    return out


def build(cfg: SimConfig) -> tuple[KvBudget, PagedAllocator | SlabAllocator, Scheduler, StepCostModel]:
    model, gpu = resolve_model(cfg.model), resolve_gpu(cfg.gpu)
    budget = compute_budget(cfg, model, gpu)
    if cfg.allocator == "paged":
        kv: PagedAllocator | SlabAllocator = PagedAllocator(
            budget.num_gpu_blocks, cfg.block_size, null_block=budget.null_block,
            free_order=cfg.resolved("free_order"), enable_caching=bool(cfg.resolved("enable_prefix_caching")),
            watermark=cfg.resolved("watermark"))
    else:
        slots = budget.available_kv_bytes // budget.bytes_per_token
        kv = SlabAllocator(int(slots), budget.max_model_len, cfg.reservation, cfg.slab_placement)
    fork = cfg.resolved("sharing") == "fork-cow" and cfg.allocator == "paged"  # slabs never share
    if fork and (cfg.resolved("chunked_prefill") or cfg.resolved("enable_prefix_caching")):
        raise ConfigError("--sharing fork-cow (paper-v0) needs the paged allocator, no chunked prefill and "
                          "no prefix caching: use --preset paper-v0")
    cpu_blocks = int(cfg.swap_space * 2**30 // budget.bytes_per_block) if cfg.preemption == "swap" else 0
    sched = Scheduler(
        kv, max_num_seqs=budget.max_num_seqs, max_num_batched_tokens=budget.max_num_batched_tokens,
        policy=cfg.policy,
        choose_victim=VICTIMS[cfg.victim or ("priority" if cfg.policy == "priority" else "last")],
        reserve_full_isl=bool(cfg.resolved("reserve_full_isl")),
        chunked_prefill=bool(cfg.resolved("chunked_prefill")),
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        preemption=cfg.preemption, cpu_swap_blocks=cpu_blocks, fork_cow=fork,
        rng=np.random.default_rng(cfg.seed))
    cost = build_cost_model(cfg.cost_model, model, gpu, cfg.tensor_parallel_size,
                            Path(cfg.calibration) if cfg.calibration else None)
    return budget, kv, sched, cost


def rejecter(budget: KvBudget, kv: PagedAllocator | SlabAllocator, sched: Scheduler) -> Callable[[Request], str]:
    max_len = budget.max_model_len

    def reject(r: Request) -> str:
        if r.prompt_tokens + r.output_tokens > max_len:
            return f"prompt+output {r.prompt_tokens + r.output_tokens} > max_model_len {max_len}"
        if not sched.chunked_prefill and r.prompt_tokens > sched.max_num_batched_tokens:
            return f"prompt {r.prompt_tokens} > max_num_batched_tokens {sched.max_num_batched_tokens} (no chunked prefill)"
        if isinstance(kv, PagedAllocator):
            if cdiv(r.final_tokens, kv.block_size) > kv.usable_blocks:
                return f"needs {cdiv(r.final_tokens, kv.block_size)} blocks > KV pool of {kv.usable_blocks}"
        elif not kv.can_ever_fit(r):
            return f"chunk of {kv.chunk_slots(r)} slots > largest contiguous region of the KV pool"
        return ""

    return reject


# ---- running -------------------------------------------------------------------------------------
def simulate(cfg: SimConfig, trace: Trace, *, check: bool = False, progress: Any = None,
             load_s: float = 0.0, on_step: Callable[[Replica], None] | None = None) -> SimResult:
    """Run one replica over the trace. ``check=True`` verifies allocator invariants every step.

    ``on_step(replica)`` is called after every step that runs one at a time; fast-forwarded
    steps skip it, so pass ``exact_steps=True`` in the config to see every step.
    """
    t0 = time.perf_counter()
    budget, kv, sched, cost = build(cfg)
    reqs = make_requests(trace, cfg)
    env = simpy.Environment()
    on_progress = None
    if progress is not None:
        total = len(reqs)
        state = {"last": -1}

        def on_progress(rep: Replica) -> None:
            if rep.step - state["last"] >= 2048:
                state["last"] = rep.step
                progress(len(rep.finished) + len(rep.rejected), total)

    rep = Replica(env, sched, cost, block_bytes=budget.bytes_per_block, exact_steps=cfg.exact_steps,
                  check=check, reject=rejecter(budget, kv, sched), on_step=on_step,
                  on_progress=on_progress)
    rep.inbox.extend(reqs)
    env.run()
    if check:
        kv.check([])
    sim_s = time.perf_counter() - t0
    requests = request_frame(reqs)
    steps = rep.log.frame()
    summary = summarize(cfg, budget, cost.name, requests, steps, sched, kv, rep)
    summary["timings"] = {"load_s": round(load_s, 4), "simulate_s": round(sim_s, 4), "write_s": 0.0}
    summary["trace"] = {"path": trace.path, "format": trace.format, "num_rows": trace.num_requests,
                        "content_hash": trace.content_hash, "num_bad_rows": trace.num_bad_rows}
    return SimResult(cfg, budget, cost.name, requests, steps, summary)


def request_frame(reqs: list[Request]) -> pd.DataFrame:
    def col(name: str, dtype: Any) -> np.ndarray:
        return np.fromiter((getattr(r, name) for r in reqs), dtype=dtype, count=len(reqs))

    def neg_nan(a: np.ndarray) -> np.ndarray:
        return np.where(a < 0, np.nan, a)

    status = np.array(["finished" if r.status == Status.FINISHED else
                       "rejected" if r.status == Status.REJECTED else "unfinished" for r in reqs], dtype=object)
    fs, ft, fn = (neg_nan(col(c, np.float64)) for c in ("first_scheduled_s", "first_token_s", "finish_s"))
    arr = col("arrival_s", np.float64)
    out_t = col("output_tokens", np.int64)
    tpot = np.where(out_t > 1, (fn - ft) / np.maximum(out_t - 1, 1), np.nan)
    frame = pd.DataFrame({
        "request_id": [r.request_id for r in reqs], "arrival_s": arr,
        "prompt_tokens": col("prompt_tokens", np.int64), "output_tokens": out_t,
        "status": status, "reject_reason": [r.reject_reason for r in reqs],
        "first_scheduled_s": fs, "first_token_s": ft, "finish_s": fn,
        "first_scheduled_step": col("first_scheduled_step", np.int64),
        "finish_step": col("finish_step", np.int64),
        "num_preemptions": col("num_preemptions", np.int64),
        "prefix_hit_tokens": col("prefix_hit_tokens", np.int64),
        "ttft_s": ft - arr, "tpot_s": tpot, "e2e_s": fn - arr,
        "parent_id": [reqs[r.parent].request_id if r.parent >= 0 else "" for r in reqs],
    })
    return frame[list(REQUEST_COLUMNS)]


def _pcts(x: pd.Series) -> dict[str, float | None]:
    x = x.dropna()
    if len(x) == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    q = np.percentile(x.to_numpy(), [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])}


MEM_CATS = ("token_state_slots", "reserved_slots", "internal_frag_slots", "external_frag_slots", "free_slots")


def memory_breakdown(steps: pd.DataFrame) -> dict[str, float]:
    """Time-averaged share of the KV pool per category (weights = step durations)."""
    if len(steps) == 0:
        return {c.removesuffix("_slots"): 0.0 for c in MEM_CATS}
    w = steps["duration_s"].to_numpy()
    pool = steps[list(MEM_CATS)].sum(axis=1).to_numpy().astype(float)
    out = {}
    for c in MEM_CATS:
        share = steps[c].to_numpy() / pool
        out[c.removesuffix("_slots")] = float(np.average(share, weights=w)) if w.sum() > 0 else float(share.mean())
    return out


def summarize(cfg: SimConfig, budget: KvBudget, cost_name: str, req: pd.DataFrame, steps: pd.DataFrame,
              sched: Scheduler, kv: PagedAllocator | SlabAllocator, rep: Replica) -> dict[str, Any]:
    done = req[req["status"] == "finished"]
    span = float(done["finish_s"].max() - req["arrival_s"].min()) if len(done) else 0.0
    out_tokens = int(done["output_tokens"].sum())
    st = sched.stats
    used_share = 1.0 - memory_breakdown(steps)["free"] if len(steps) else 0.0
    held = steps["token_state_slots"] + steps["internal_frag_slots"] + steps["reserved_slots"]
    return {
        "kvsim_version": __version__,
        "config": cfg.model_dump(),
        "cost_model": cost_name,
        "num_gpu_blocks": budget.num_gpu_blocks,
        "budget": budget.as_dict(),
        "num_requests": len(req),
        "num_finished": len(done),
        "num_rejected": int((req["status"] == "rejected").sum()),
        "num_unfinished": int((req["status"] == "unfinished").sum()),
        "num_steps": len(steps),
        "fast_forward_steps": rep.ff_steps,
        "simulated_s": span,
        "throughput": {
            "requests_per_s": len(done) / span if span > 0 else 0.0,
            "output_tokens_per_s": out_tokens / span if span > 0 else 0.0,
            "total_tokens_per_s": (out_tokens + int(done["prompt_tokens"].sum())) / span if span > 0 else 0.0,
        },
        "ttft_s": _pcts(done["ttft_s"]), "tpot_s": _pcts(done["tpot_s"]), "e2e_s": _pcts(done["e2e_s"]),
        "memory": memory_breakdown(steps),
        "kv_usage_mean": used_share,
        "kv_held_slots_peak": int(held.max()) if len(steps) else 0,
        "preemptions": int(sched.num_preemptions),
        "preemptions_per_1k": 1000.0 * sched.num_preemptions / max(len(req), 1),
        "swap_fallbacks": sched.swap_fallbacks,
        "evictions": int(kv.evictions),
        "prefix_cache": {
            "queries": st.queries, "hits": st.hits,
            "hit_rate": st.hits / st.queries if st.queries else 0.0,
            "preempted_queries": st.preempted_queries, "preempted_hits": st.preempted_hits,
        },
        "sharing_saved_fraction": float(
            (steps["shared_blocks_saved"] / (steps["shared_blocks_saved"] + (held / max(kv.block_size, 1)).clip(lower=1))).mean())
        if len(steps) and kv.block_size else 0.0,
        "busy_fraction": rep.busy_s / span if span > 0 else 0.0,
        "rejections": req.loc[req["status"] == "rejected", "reject_reason"].value_counts().to_dict(),
    }
