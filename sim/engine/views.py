"""What callers read of a replica: its kernel's parts and counters, as properties."""

from __future__ import annotations

from sim.engine.step import StepKernel
from sim.io.records import StepLog
from sim.kv.base import KvAllocator
from sim.request import Request
from sim.sched.scheduler import Scheduler


class KernelViews:
    """Read-only views of ``self.kernel`` (a :class:`~sim.engine.step.StepKernel`)."""

    kernel: StepKernel

    @property
    def sched(self) -> Scheduler:
        return self.kernel.sched

    @property
    def kv(self) -> KvAllocator:
        return self.kernel.kv

    @property
    def log(self) -> StepLog:
        return self.kernel.log

    @property
    def step(self) -> int:
        return self.kernel.step

    @property
    def finished(self) -> list[Request]:
        return self.kernel.finished

    @property
    def busy_s(self) -> float:
        return self.kernel.busy_s

    @property
    def ff_steps(self) -> int:
        return self.kernel.ff_steps
