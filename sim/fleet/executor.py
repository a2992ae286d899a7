"""Run independent tasks locally (process pool) or on Ray core tasks.

Every task is ``fn(task, shared)``; ``shared`` (the trace frame) is sent once per worker
(pool initializer) or once per cluster (``ray.put``), not once per task. Results come back in
task order, so both backends give identical output for the same inputs.

Ray notes (distributed-sweeps.md): we set ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (bind
loopback) and ``RAY_USAGE_STATS_ENABLED=0`` before importing Ray, start a local instance only
when no ``address`` is given, shut down only what we started, and never run ``ray stop``.
With ``--address`` the kvsim package must be importable on the cluster's workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from sim.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")
Done = Callable[[int, Any], None]

_SHARED: Any = None


def _init(shared: Any) -> None:
    global _SHARED
    _SHARED = shared


def _call(fn: Callable[[Any, Any], Any], task: Any) -> Any:
    return fn(task, _SHARED)


def run_tasks(fn: Callable[[T, Any], R], tasks: Sequence[T], shared: Any, *, backend: str = "local",
              workers: int = 1, address: str | None = None, on_done: Done | None = None) -> list[R]:
    """``[fn(t, shared) for t in tasks]``, in parallel. ``fn`` must be a module-level function."""
    if backend == "ray":
        return _run_ray(fn, tasks, shared, workers, address, on_done)
    if backend != "local":
        raise ConfigError(f"--backend {backend!r}: expected local or ray")
    if workers <= 1 or len(tasks) <= 1:
        out = []
        for i, t in enumerate(tasks):
            out.append(fn(t, shared))
            if on_done:
                on_done(i, out[-1])
        return out
    results: list[Any] = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_init,
                             initargs=(shared,)) as pool:
        futs = {pool.submit(_call, fn, t): i for i, t in enumerate(tasks)}
        for f in as_completed(futs):
            i = futs[f]
            results[i] = f.result()
            if on_done:
                on_done(i, results[i])
    return results


def _ray_call(fn: Callable[[Any, Any], Any], task: Any, shared: Any) -> Any:
    return fn(task, shared)


def _run_ray(fn: Callable[[T, Any], R], tasks: Sequence[T], shared: Any, workers: int,
             address: str | None, on_done: Done | None) -> list[R]:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray: Ray is not installed (pip install 'kvsim[ray]')") from None
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=max(workers, 1), include_dashboard=False, log_to_driver=False)
        started = True
    try:
        ref = ray.put(shared)
        remote = ray.remote(max_retries=3)(_ray_call)
        refs = [remote.remote(fn, t, ref) for t in tasks]
        index = {r: i for i, r in enumerate(refs)}
        results: list[Any] = [None] * len(tasks)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for r in done:
                i = index[r]
                results[i] = ray.get(r)
                if on_done:
                    on_done(i, results[i])
        return results
    finally:
        if started:
            ray.shutdown()
