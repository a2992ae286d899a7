"""Parameter sweeps: grid expansion, one simulation per point, resumable Parquet results.

    grid = parse_sets(["gpu_memory_utilization=0.85,0.9", "block_size=8,16,32"])
    df = run_sweep(grid, base={"cost_model": "roofline"}, trace="t.csv", out=Path("sw"))

Every point is keyed by a hash of its full resolved config plus the trace's content hash, so
a rerun into the same directory computes only what is missing. Storage is crash-safe by
construction::

    DIR/parts/<key>.parquet    one file per finished point, written to a temp name, then renamed
    DIR/sweep.parquet          compaction of parts (atomic replace), then the parts are deleted

A hard kill can leave parts next to a sweep.parquet that already holds them; compaction
de-duplicates on ``key``, so rows are never lost or duplicated.

Backends: ``local`` (a spawn-context ProcessPoolExecutor; a dead worker breaks the pool, which
is rebuilt and the unfinished points resubmitted, up to ``max_retries`` times) and ``ray``
(Ray core tasks with ``max_retries`` for worker death; see distributed-sweeps.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import product
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sim.config import SimConfig, make_config, read_yaml
from sim.errors import ConfigError
from workloads import COLUMNS, Trace, load_trace

TRACE_KEY = "trace"
#: Keys that mean nothing for an allocator (or another switch): collapsed to the field default.
IRRELEVANT: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("allocator", "slab", ("block_size", "enable_prefix_caching", "preemption", "swap_space")),
    ("allocator", "paged", ("reservation", "slab_placement")),
    ("preemption", "recompute", ("swap_space",)),
)
#: Columns that depend on wall-clock time (excluded when comparing backends).
TIMING_COLUMNS = ("wall_s", "simulate_s")
ProgressFn = Callable[[int, int, int], None]  # (done, total, failed)


# ---- the grid ------------------------------------------------------------------------------------
def _norm_key(k: str) -> str:
    k = str(k).strip().replace("-", "_")
    if k != TRACE_KEY and k not in SimConfig.model_fields:
        raise ConfigError(f"sweep key {k!r}: not a simulate option (valid: trace, {', '.join(SimConfig.model_fields)})")
    return k


def _scalar(text: str) -> Any:
    """``16`` -> 16, ``0.9`` -> 0.9, ``true`` -> True, ``null`` -> None, else the string."""
    try:
        v = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return v if isinstance(v, (int, float, bool, str)) or v is None else text


def parse_sets(sets: Iterable[str]) -> dict[str, list[Any]]:
    """``["block_size=8,16", "allocator=paged"]`` -> ``{"block_size": [8, 16], ...}``."""
    grid: dict[str, list[Any]] = {}
    for s in sets:
        key, eq, vals = s.partition("=")
        if not eq or not vals.strip():
            raise ConfigError(f"--set {s!r}: expected KEY=v1,v2,...")
        k = _norm_key(key)
        grid.setdefault(k, []).extend(
            v.strip() if k == TRACE_KEY else _scalar(v.strip()) for v in vals.split(","))
    return grid


def load_grid_yaml(path: Path) -> dict[str, list[Any]]:
    """A YAML mapping of key -> value or list of values (scalars are fixed for every point)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sweep keys to value lists")
    return {_norm_key(k): list(v) if isinstance(v, list) else [v] for k, v in data.items()}


@dataclass(frozen=True, slots=True)
class Point:
    """One simulation to run: the resolved config, the trace, and the swept keys' values."""

    key: str
    config: dict[str, Any]
    trace_path: str
    trace_hash: str
    columns: dict[str, Any] = field(default_factory=dict)


def _collapse(kw: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Reset options that mean nothing for this point to their defaults; return those names."""
    cfg = make_config("sweep grid", **kw)
    dead: set[str] = set()
    for switch, value, keys in IRRELEVANT:
        if getattr(cfg, switch) == value:
            dead.update(keys)
    if cfg.cost_model.partition(":")[0] != "calibrated":
        dead.add("calibration")
    return {k: v for k, v in kw.items() if k not in dead}, dead


def trace_hash(trace: Trace) -> str:
    """Stable content hash of a trace's schema columns.

    Works around ``Trace.content_hash``, which hashes the raw bytes of non-numeric columns:
    for pandas' StringDtype/object columns those are pointers, different on every call.
    """
    h = hashlib.sha256()
    df = trace.df
    for col in (c for c in COLUMNS if c in df.columns):
        s = df[col]
        h.update(col.encode())
        if pd.api.types.is_numeric_dtype(s.dtype):
            h.update(np.ascontiguousarray(s.to_numpy()).tobytes())
        else:
            h.update(repr([v.tolist() if isinstance(v, np.ndarray) else v for v in s.tolist()]).encode())
    return h.hexdigest()[:16]


def point_key(config: dict[str, Any], trace_hash: str) -> str:
    blob = json.dumps(config, sort_keys=True, default=str) + "|" + trace_hash
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def expand(grid: dict[str, list[Any]], base: dict[str, Any] | None = None,
           trace: str | Path | None = None) -> list[Point]:
    """Cartesian product of ``grid`` over ``base``; invalid values raise ConfigError up front.

    Points that differ only in collapsed keys (e.g. block_size under allocator=slab) become one
    point; their column for the collapsed key is None.
    """
    base = dict(base or {})
    traces = [str(t) for t in grid.get(TRACE_KEY, [])] or ([str(trace)] if trace else [])
    if not traces:
        raise ConfigError("sweep: no trace (give TRACE or --set trace=PATH,...)")
    hashes = {t: trace_hash(load_trace(t)) for t in dict.fromkeys(traces)}
    keys = [k for k in grid if k != TRACE_KEY]
    points: dict[str, Point] = {}
    for tr in traces:
        for combo in product(*(grid[k] for k in keys)):
            kw, dead = _collapse({**base, **dict(zip(keys, combo, strict=True))})
            config = make_config("sweep grid", **kw).model_dump()
            key = point_key(config, hashes[tr])
            if key not in points:
                cols = {k: None if k in dead else config[k] for k in keys}
                points[key] = Point(key, config, tr, hashes[tr], {TRACE_KEY: tr, **cols})
    return list(points.values())


# ---- one point (runs in a worker) -----------------------------------------------------------------
_TRACES: dict[str, tuple[Trace, str]] = {}  # per worker process: path -> (trace, hash)


def _trace_for(p: Point) -> Trace:
    got = _TRACES.get(p.trace_path)
    if got is None or got[1] != p.trace_hash:
        tr = load_trace(p.trace_path)
        got = _TRACES[p.trace_path] = (tr, trace_hash(tr))
    if got[1] != p.trace_hash:
        raise RuntimeError(f"{p.trace_path}: content changed since the sweep was planned")
    return got[0]


def flatten_summary(s: dict[str, Any]) -> dict[str, Any]:
    """summary.json -> flat metric columns (ttft_p99_s, throughput_rps, mem_token_state, ...)."""
    out: dict[str, Any] = {}
    tp = s["throughput"]
    out.update(throughput_rps=tp["requests_per_s"], output_tokens_per_s=tp["output_tokens_per_s"],
               total_tokens_per_s=tp["total_tokens_per_s"])
    for lat in ("ttft_s", "tpot_s", "e2e_s"):
        for q, v in s[lat].items():
            out[f"{lat.removesuffix('_s')}_{q}_s"] = v
    out.update({f"mem_{k}": v for k, v in s["memory"].items()})
    out.update({f"prefix_{k}": v for k, v in s["prefix_cache"].items()})
    for k, v in s.items():
        if isinstance(v, (int, float, str)) and not isinstance(v, bool) and k not in out:
            out[k] = v
    out["cost_model_name"] = out.pop("cost_model")
    out["simulate_s"] = s["timings"]["simulate_s"]
    return out


def _row_head(p: Point) -> dict[str, Any]:
    return {"key": p.key, **p.columns, "model": p.config["model"], "gpu": p.config["gpu"],
            "trace_hash": p.trace_hash}


def failed_row(p: Point, error: str) -> dict[str, Any]:
    return {**_row_head(p), "status": "failed", "error": error, "wall_s": 0.0}


def run_point(p: Point, trace: Trace | None = None) -> dict[str, Any]:
    """Simulate one point; never raises (a failure becomes a row with ``status='failed'``)."""
    from sim.run import simulate

    t0 = time.perf_counter()
    row = _row_head(p)
    try:
        res = simulate(SimConfig(**p.config), trace if trace is not None else _trace_for(p))
        row.update(status="ok", error="", **flatten_summary(res.summary))
    except Exception as e:  # the point fails, the sweep goes on
        last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f" ({Path(last.filename).name}:{last.lineno})" if last else ""
        row.update(status="failed", error=f"{type(e).__name__}: {e}{where}")
    row["wall_s"] = time.perf_counter() - t0
    return row


# ---- storage --------------------------------------------------------------------------------------
class SweepStore:
    """``DIR/parts/<key>.parquet`` per finished point, compacted into ``DIR/sweep.parquet``."""

    def __init__(self, out: Path) -> None:
        self.out, self.parts = out, out / "parts"
        self.parts.mkdir(parents=True, exist_ok=True)
        self.file = out / "sweep.parquet"

    def done(self) -> dict[str, str]:
        """key -> status of every recorded point (compacted or still a part)."""
        got: dict[str, str] = {}
        if self.file.exists():
            df = pd.read_parquet(self.file, columns=["key", "status"])
            got.update(zip(df["key"], df["status"], strict=True))
        for f in self.parts.glob("*.parquet"):
            got[f.stem] = pd.read_parquet(f, columns=["status"])["status"].iloc[0]
        return got

    def append(self, row: dict[str, Any]) -> None:
        tmp = self.parts / f".{row['key']}.{os.getpid()}.tmp"
        pd.DataFrame([row]).to_parquet(tmp, index=False)
        os.replace(tmp, self.parts / f"{row['key']}.parquet")

    def compact(self, order: list[str] | None = None) -> pd.DataFrame:
        """Merge parts into sweep.parquet (latest row per key wins); return the table."""
        frames, parts = [], sorted(self.parts.glob("*.parquet"))
        if self.file.exists():
            frames.append(pd.read_parquet(self.file))
        frames += [pd.read_parquet(f) for f in parts]
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True).drop_duplicates("key", keep="last")
        if order:
            rank = {k: i for i, k in enumerate(order)}
            df = df.assign(_o=df["key"].map(rank).fillna(len(rank))).sort_values("_o", kind="stable")
            df = df.drop(columns="_o")
        df = _typed_columns(df.reset_index(drop=True))
        tmp = self.out / f".sweep.{os.getpid()}.tmp"
        df.to_parquet(tmp, index=False)
        os.replace(tmp, self.file)
        for f in parts:
            f.unlink(missing_ok=True)
        return df


_DTYPES = {int: "Int64", int | None: "Int64", float: "float64", float | None: "float64",
           bool: "boolean", bool | None: "boolean"}


def _typed_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Option columns typed by their SimConfig field, whatever the order parts were merged in.

    A collapsed cell is None; a one-row part holding it has a null-typed column, so without
    this the merged dtype would depend on which part came first.
    """
    for c in df.columns:
        f = SimConfig.model_fields.get(c)
        dtype = _DTYPES.get(f.annotation) if f is not None else None  # type: ignore[arg-type]
        if dtype is not None:
            col = df[c].astype(object).where(df[c].notna(), None)
            df[c] = pd.array(col.tolist(), dtype=dtype)
    return df


# ---- backends -------------------------------------------------------------------------------------
def _run_local(points: list[Point], jobs: int, max_retries: int) -> Iterator[dict[str, Any]]:
    if jobs <= 1:
        for p in points:
            yield run_point(p)
        return
    todo = {p.key: p for p in points}
    for attempt in range(max_retries + 1):
        try:
            with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
                futs: dict[Future[dict[str, Any]], str] = {pool.submit(run_point, p): k for k, p in todo.items()}
                while futs:
                    fin, _ = wait(futs, return_when=FIRST_COMPLETED)
                    for f in fin:
                        k = futs.pop(f)
                        row = f.result()
                        del todo[k]
                        yield row
            return
        except BrokenProcessPool:
            if attempt == max_retries:
                for p in todo.values():
                    yield failed_row(p, f"worker died {max_retries + 1} times (BrokenProcessPool)")
                return


PointFn = Callable[[Point, Trace | None], dict[str, Any]]


def _run_ray(points: list[Point], jobs: int, max_retries: int, address: str | None,
             fn: PointFn = run_point) -> Iterator[dict[str, Any]]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray: Ray is not installed (pip install 'kvsim[ray]')") from None
    started = not ray.is_initialized()
    if started:
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address is None and not os.environ.get("RAY_ADDRESS"):
            kw["num_cpus"] = max(jobs, 1)
        ray.init(address=address, **kw)
    try:
        task = ray.remote(num_cpus=1, max_retries=max_retries)(fn)
        traces = {p.trace_hash: p.trace_path for p in points}
        trefs = {h: ray.put(load_trace(path)) for h, path in traces.items()}
        refs = {task.remote(p, trefs[p.trace_hash]): p for p in points}  # type: ignore[arg-type]
        while refs:
            (ref,), _ = ray.wait(list(refs), num_returns=1)
            p = refs.pop(ref)
            try:
                yield ray.get(ref)
            except Exception as e:  # worker death after max_retries, or a lost object
                yield failed_row(p, f"{type(e).__name__}: {e}")
    finally:
        if started:
            ray.shutdown()  # disconnects; never stops a cluster we joined


# ---- the driver -----------------------------------------------------------------------------------
@dataclass(slots=True)
class SweepRun:
    table: pd.DataFrame
    planned: int
    skipped: int
    ran: int
    failed: int


def run_sweep(points: list[Point], out: Path, *, backend: str = "local", jobs: int = 1,
              address: str | None = None, max_retries: int = 3, retry_failed: bool = False,
              progress: ProgressFn | None = None, ray_fn: PointFn = run_point) -> SweepRun:
    """Run the points not yet recorded under ``out``; return the compacted table.

    ``ray_fn`` replaces the Ray task body (tests use it to kill a worker on purpose).
    """
    store = SweepStore(out)
    done = store.done()
    todo = [p for p in points if p.key not in done or (retry_failed and done[p.key] != "ok")]
    skipped = len(points) - len(todo)
    if backend == "local":
        rows = _run_local(todo, jobs, max_retries)
    elif backend == "ray":
        rows = _run_ray(todo, jobs, max_retries, address, ray_fn)
    else:
        raise ConfigError(f"--backend {backend!r}: expected local or ray")
    ran = failed = 0
    if progress:
        progress(0, len(todo), 0)
    for row in rows:
        store.append(row)
        ran += 1
        failed += row["status"] != "ok"
        if progress:
            progress(ran, len(todo), failed)
    table = store.compact([p.key for p in points])
    return SweepRun(table, len(points), skipped, ran, failed)
