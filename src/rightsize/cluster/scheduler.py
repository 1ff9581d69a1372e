"""The cluster scheduler: waiting, running and finished queues over one pool of resources.

NEARCHUS §IV ("System Implementation"): jobs arrive in the *waiting queue*;
when resources become available the Resource Allocator moves a job to the
*running queue* and launches it; a completed job moves to the *finished
queue*. FCFS orders both queues by default, shortest job first (SJF, by
compute work) is the option the paper names.

Admission asks the job's policy for its launch plan with what is free now:
NEARCHUS and Optimus need ``R0`` of the budget, FA-BF its whole (best) shape,
so the policy decides when a job can start. The queue is strict — a job that
cannot start blocks those behind it — and while anyone waits, running jobs
are offered no CPU to grow into, so that freed capacity goes to the queue
first (our reading of "moves the job ... once resources become available").
The scheduler keeps the books; the simulator drives it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from rightsize.core.errors import unknown_name
from rightsize.core.resources import Resources

ORDERS = ("fcfs", "sjf")


class Queued(Protocol):
    """What the scheduler needs to know about a job."""

    name: str
    arrival_s: float
    work_core_s: float  # compute work, for SJF


J = TypeVar("J", bound=Queued)


@dataclass
class Scheduler(Generic[J]):
    """Queues and the resource books of one cluster.

    Attributes:
        capacity: everything jobs may be given.
        order: ``fcfs`` (arrival) or ``sjf`` (least compute work first).
    """

    capacity: Resources
    order: str = "fcfs"
    waiting: list[J] = field(default_factory=list)
    running: list[J] = field(default_factory=list)
    finished: list[J] = field(default_factory=list)
    allocations: dict[str, Resources] = field(default_factory=dict)
    allocated: Resources = field(default_factory=Resources)  # the sum of ``allocations``
    _free: tuple[Resources, Resources] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise unknown_name("scheduling order", self.order, ORDERS)

    def set_capacity(self, capacity: Resources) -> None:
        """What all running jobs may hold from now on (a service's capacity less what runs
        beside it on the host); jobs already running keep what they hold."""
        if capacity != self.capacity:
            self.capacity, self._free = capacity, None

    def free(self) -> Resources:
        """What no job holds (never negative); remembered until an allocation changes."""
        used = self.allocated
        if self._free is None or self._free[0] is not used:
            self._free = (used, self.capacity.less(used))
        return self._free[1]

    def free_for_running(self) -> Resources:
        """What a running job may grow into: all that is free, but no CPU while jobs wait.

        CPU is what the papers' jobs queue for; memory is plentiful in their
        clusters, so a running job may still take free memory (DLRover's OOM
        relaunch) while others wait.
        """
        free = self.free()
        return Resources(0.0, free.memory_bytes, 0) if self.waiting else free

    def fair_share_cores(self, floor_cores: float = 0.0) -> float:
        """The CPU each job that wants to run (running or waiting) gets if the capacity is
        split evenly among them, and at least ``floor_cores``."""
        wanting = max(1, len(self.running) + len(self.waiting))
        return max(self.capacity.cpu_cores / wanting, floor_cores)

    def allocate(self, job: J, amount: Resources, slack_cores: float = 0.0) -> None:
        """Set ``job``'s allocation; raises if what it grows by is not free.

        ``slack_cores`` tolerates the drift of per-node millicore rounding.
        """
        before = self.allocations[job.name] if job.name in self.allocations else Resources()
        free = self.free()
        grow_cpu = amount.cpu_cores - before.cpu_cores
        grow_memory = amount.memory_bytes - before.memory_bytes
        if grow_cpu > free.cpu_cores + slack_cores or grow_memory > free.memory_bytes:
            raise RuntimeError(f"allocation of {amount} to {job.name} exceeds the cluster")
        self.allocations[job.name] = amount
        self.allocated = self.allocated - before + amount

    # -- queues ------------------------------------------------------------------------
    def key(self, job: J) -> tuple[float, float, str]:
        first = job.work_core_s if self.order == "sjf" else job.arrival_s
        return (first, job.arrival_s, job.name)

    def submit(self, job: J) -> None:
        bisect.insort(self.waiting, job, key=self.key)

    def admit(
        self, launch: Callable[[J, Resources], Resources | None], slack_cores: float = 0.0
    ) -> list[J]:
        """Start waiting jobs in order while ``launch(job, free)`` accepts them.

        ``launch`` returns the resources the job takes, or ``None`` if it cannot
        start with what is free (then the jobs behind it wait too).
        """
        started = []
        while self.waiting:
            job = self.waiting[0]
            taken = launch(job, self.free())
            if taken is None:
                break
            self.waiting.pop(0)
            self.allocate(job, taken, slack_cores)
            bisect.insort(self.running, job, key=self.key)
            started.append(job)
        return started

    def finish(self, job: J) -> None:
        self.running.remove(job)
        released = self.allocations.pop(job.name, Resources())
        self.allocated = self.allocated - released
        self.finished.append(job)
