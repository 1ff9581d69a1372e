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
The scheduler keeps the books; the simulator and the service's allocator drive it, only
through its methods (its lists are theirs to read): a job enters by :meth:`submit`, starts
by :meth:`admit`, changes what it holds by :meth:`allocate`, and leaves by :meth:`finish`
(it ran and ended), :meth:`fail` (it cannot run on) or :meth:`cancel` (withdrawn while it
waits).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from rightsize.core.errors import choose
from rightsize.core.resources import Resources


class SchedulingOrder(StrEnum):
    """The order of the queues: first come first served, or shortest job (least work) first."""

    FCFS = "fcfs"
    SJF = "sjf"


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
        order: :class:`SchedulingOrder` (or its name; an unknown one is refused).
    """

    capacity: Resources
    order: SchedulingOrder = SchedulingOrder.FCFS
    waiting: list[J] = field(default_factory=list)
    running: list[J] = field(default_factory=list)
    finished: list[J] = field(default_factory=list)
    allocations: dict[str, Resources] = field(default_factory=dict)
    allocated: Resources = field(default_factory=Resources)  # the sum of ``allocations``
    _free: tuple[Resources, Resources] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.order = choose(SchedulingOrder, self.order, "scheduling order")

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

    def wanting(self) -> int:
        """How many jobs want to run: those running and those waiting."""
        return len(self.running) + len(self.waiting)

    def fair_share_cores(self, floor_cores: float = 0.0) -> float:
        """The CPU each job that wants to run (running or waiting) gets if the capacity is
        split evenly among them, and at least ``floor_cores``."""
        return max(self.capacity.cpu_cores / max(1, self.wanting()), floor_cores)

    def holds(self, name: str) -> bool:
        """Whether the job called ``name`` runs here (it has an allocation)."""
        return name in self.allocations

    def held(self, name: str) -> Resources:
        """What the job called ``name`` holds (nothing if it does not run here)."""
        return self.allocations.get(name, Resources())

    def allocate(self, name: str, amount: Resources, slack_cores: float = 0.0) -> None:
        """Set the allocation of the job called ``name``; raises if what it grows by is not
        free.

        ``slack_cores`` tolerates the drift of per-node millicore rounding
        (``core.shape.rounding_slack``).
        """
        before = self.allocations[name] if name in self.allocations else Resources()
        free = self.free()
        grow_cpu = amount.cpu_cores - before.cpu_cores
        grow_memory = amount.memory_bytes - before.memory_bytes
        if grow_cpu > free.cpu_cores + slack_cores or grow_memory > free.memory_bytes:
            raise RuntimeError(f"allocation of {amount} to {name} exceeds the cluster")
        self.allocations[name] = amount
        self.allocated = self.allocated - before + amount

    # -- queues ------------------------------------------------------------------------
    def key(self, job: J) -> tuple[float, float, str]:
        first = job.work_core_s if self.order == SchedulingOrder.SJF else job.arrival_s
        return (first, job.arrival_s, job.name)

    def submit(self, job: J) -> None:
        bisect.insort(self.waiting, job, key=self.key)

    def admit(
        self, launch: Callable[[J, Resources], Resources | None], slack_cores: float = 0.0
    ) -> list[J]:
        """Start waiting jobs in order while ``launch(job, free)`` accepts them.

        ``launch`` returns the resources the job takes, or ``None`` if it cannot
        start with what is free (then the jobs behind it wait too). It must not change the
        queues (a job it finds cannot run at all is :meth:`fail`-ed after admission).
        """
        started = []
        while self.waiting:
            job = self.waiting[0]
            taken = launch(job, self.free())
            if taken is None:
                break
            self.waiting.pop(0)
            self.allocate(job.name, taken, slack_cores)
            bisect.insort(self.running, job, key=self.key)
            started.append(job)
        return started

    def finish(self, job: J) -> None:
        """``job`` ran and ended: it leaves the running queue for the finished one, and what
        it held is free."""
        self.running.remove(job)
        self._release(job)
        self.finished.append(job)

    def fail(self, job: J) -> None:
        """``job`` cannot run (on): it leaves whichever queue it is in for the finished one,
        and what it held is free."""
        (self.running if job in self.running else self.waiting).remove(job)
        self._release(job)
        self.finished.append(job)

    def cancel(self, name: str) -> J | None:
        """Withdraw the waiting job called ``name`` from the queue (it never ran, so it joins
        no other); returns it, or None if no such job waits. A running job is stopped by its
        mechanism and then :meth:`finish`-es."""
        job = next((j for j in self.waiting if j.name == name), None)
        if job is not None:
            self.waiting.remove(job)
        return job

    def _release(self, job: J) -> None:
        released = self.allocations.pop(job.name, Resources())
        self.allocated = self.allocated - released
