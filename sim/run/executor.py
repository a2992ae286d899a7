"""Run independent tasks locally (process pool) or on Ray core tasks: the one executor behind
``kvsim sweep`` and ``kvsim plan``.

Every task is ``fn(task, shared)``. ``shared`` (a trace) is sent once per worker (pool
initializer) or once per cluster (``ray.put``), not once per task; with ``key`` it is a mapping
and each task gets ``shared[key(task)]`` (a sweep over several traces ships each trace once).
:func:`completed` yields ``(index, result)`` as tasks finish; :func:`run_tasks` collects them in
task order, so both backends give identical output for the same inputs.

Dead workers: a local worker that dies breaks the whole pool, which is rebuilt and the
unfinished tasks resubmitted, up to ``max_retries`` times; Ray retries the task itself
(``max_retries``). A task still lost after that becomes ``lost(task, reason)`` when the caller
gives ``lost`` (a sweep records a failed row), else raises :class:`TaskLost`. An exception
raised by ``fn`` itself propagates, except on Ray with ``lost``: there every error of a task
(``fn``'s, a crash, a lost object) becomes ``lost(task, reason)``.

``start`` is the local pool's multiprocessing start method (None: the platform default).
``fork`` starts fast and needs no ``if __name__ == "__main__"`` guard in the calling script;
``spawn`` gives workers a fresh interpreter that inherits none of the parent's threads (a
sweep's driver has pyarrow's running by the time it rebuilds a broken pool).

Ray notes (distributed-sweeps.md): we set ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (bind
loopback) and ``RAY_USAGE_STATS_ENABLED=0`` before importing Ray, and import it only when the
Ray backend is chosen. We start a local instance only when neither ``address`` nor
``RAY_ADDRESS`` is given, shut down only what we started, and never run ``ray stop``. With an
address the kvsim package must be importable on the cluster's workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any, TypeVar

from sim.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")
BACKENDS = ("local", "ray")
Done = Callable[[int, Any], None]


class TaskLost(RuntimeError):
    """A task whose worker died more often than ``max_retries`` allows."""


_SHARED: Any = None  # per local worker process: the ``shared`` object of its pool


def _init(shared: Any) -> None:
    global _SHARED
    _SHARED = shared


def _call(fn: Callable[[Any, Any], Any], task: Any, key: Hashable | None, keyed: bool) -> Any:
    return fn(task, _SHARED[key] if keyed else _SHARED)


def completed(fn: Callable[[T, Any], R], tasks: Sequence[T], shared: Any = None, *,
              key: Callable[[T], Hashable] | None = None, backend: str = "local", workers: int = 1,
              address: str | None = None, max_retries: int = 3, start: str | None = None,
              lost: Callable[[T, str], R] | None = None) -> Iterator[tuple[int, R]]:
    """Yield ``(i, fn(tasks[i], shared))`` as tasks finish. ``fn`` must be picklable (a
    module-level function locally; Ray also takes closures)."""
    if backend == "ray":
        return _ray(fn, tasks, shared, key, workers, address, max_retries, lost)
    if backend != "local":
        raise ConfigError(f"--backend {backend!r}: expected local or ray")
    return _local(fn, tasks, shared, key, workers, max_retries, start, lost)


def run_tasks(fn: Callable[[T, Any], R], tasks: Sequence[T], shared: Any = None, *,
              backend: str = "local", workers: int = 1, address: str | None = None,
              on_done: Done | None = None, max_retries: int = 3) -> list[R]:
    """``[fn(t, shared) for t in tasks]``, in parallel; ``on_done(i, result)`` as each finishes."""
    results: list[Any] = [None] * len(tasks)
    for i, r in completed(fn, tasks, shared, backend=backend, workers=workers, address=address,
                          max_retries=max_retries):
        results[i] = r
        if on_done:
            on_done(i, r)
    return results


def _give_up(task: T, reason: str, lost: Callable[[T, str], R] | None) -> R:
    if lost is None:
        raise TaskLost(reason)
    return lost(task, reason)


def _local(fn: Callable[[T, Any], R], tasks: Sequence[T], shared: Any,
           key: Callable[[T], Hashable] | None, workers: int, max_retries: int, start: str | None,
           lost: Callable[[T, str], R] | None) -> Iterator[tuple[int, R]]:
    if workers <= 1:
        # In this process. With workers > 1 even a single task gets a pool, so that a crash in
        # it is retried instead of killing the caller.
        for i, t in enumerate(tasks):
            yield i, fn(t, shared if key is None else shared[key(t)])
        return
    todo = dict(enumerate(tasks))
    for attempt in range(max_retries + 1):
        try:
            with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=get_context(start),
                                     initializer=_init, initargs=(shared,)) as pool:
                futs: dict[Future[R], int] = {
                    pool.submit(_call, fn, t, None if key is None else key(t), key is not None): i
                    for i, t in todo.items()}
                while futs:
                    fin, _ = wait(futs, return_when=FIRST_COMPLETED)
                    for f in fin:
                        i = futs.pop(f)
                        r = f.result()
                        del todo[i]
                        yield i, r
            return
        except BrokenProcessPool:
            if attempt == max_retries:
                for i, t in todo.items():
                    yield i, _give_up(t, f"worker died {max_retries + 1} times (BrokenProcessPool)", lost)
                return


def _ray(fn: Callable[[T, Any], R], tasks: Sequence[T], shared: Any,
         key: Callable[[T], Hashable] | None, workers: int, address: str | None, max_retries: int,
         lost: Callable[[T, str], R] | None) -> Iterator[tuple[int, R]]:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray: Ray is not installed (pip install 'kvsim[ray]')") from None
    started = not ray.is_initialized()
    if started:
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address is None and not os.environ.get("RAY_ADDRESS"):
            kw["num_cpus"] = max(workers, 1)
        ray.init(address=address, **kw)
    try:
        task_fn = ray.remote(num_cpus=1, max_retries=max_retries)(fn)
        if key is None:
            ref = ray.put(shared)
            refs = {task_fn.remote(t, ref): i for i, t in enumerate(tasks)}
        else:
            assert isinstance(shared, Mapping)
            objs = {k: ray.put(v) for k, v in shared.items()}
            refs = {task_fn.remote(t, objs[key(t)]): i for i, t in enumerate(tasks)}
        while refs:
            (done,), _ = ray.wait(list(refs), num_returns=1)
            i = refs.pop(done)
            try:
                r = ray.get(done)
            except Exception as e:  # worker death after max_retries, a lost object, or fn raised
                if lost is None:
                    raise  # Ray's error is also an instance of fn's (a ConfigError stays one)
                r = lost(tasks[i], f"{type(e).__name__}: {e}")
            yield i, r
    finally:
        if started:
            ray.shutdown()  # disconnects; never stops a cluster we joined
