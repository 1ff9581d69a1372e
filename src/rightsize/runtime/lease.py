"""What a job may hold: the capacity a master grows into, asked before it grows.

A master alone on a machine (``rightsize run``) may use all of it: :class:`MachineLease`.
Under the service many masters share one capacity, and the service's scheduler keeps
the books (cluster/scheduler.py); a master then holds a lease on its share and asks
before every change that takes more (service/lease.py). The protocol has three verbs:

- :meth:`CapacityLease.free` — what the job could grow into beyond ``shape``, for the
  policy's observation (NEARCHUS's and DLRover's free resources);
- :meth:`CapacityLease.reserve` — take what a shape needs *before* it is applied: both
  the old and the new nodes may run while a change is carried out, so a lease holds the
  larger of the two until :meth:`CapacityLease.settle` says what the job holds after;
- :meth:`CapacityLease.settle` — the job now holds ``total`` (less, after a shrink or a
  refused change: the rest goes back).

Starting nodes borrow idle CPU (:mod:`allowance`) only up to :meth:`CapacityLease.ceiling`:
the budget when the job is alone, what it reserved when it shares — lending another job's
free share would put more in the cgroups than the books hold.

A refused reservation is a refused plan, recorded on the timeline with the reason,
like a plan over budget; the job keeps its shape.
"""

from __future__ import annotations

from typing import Protocol

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape


class LeaseClosed(ConnectionError):
    """Whoever keeps the shared books is gone (the service, for its runner): the job stops
    (it resumes on the service's next start)."""


class CapacityLease(Protocol):
    """A job's claim on shared capacity. A lease whose other end is gone raises
    :class:`LeaseClosed` from any verb."""

    def free(self, shape: ClusterShape) -> Resources:
        """What the job could hold beyond ``shape`` now."""

    def reserve(self, total: Resources, nodes: int | None = None) -> str | None:
        """Take ``total`` (the job's whole shape, of ``nodes`` nodes: the books allow each
        node's rounding, ``core.shape.rounding_slack``) if it fits; None if granted, else
        why not."""

    def settle(self, total: Resources, nodes: int | None = None) -> None:
        """The job now holds ``total`` on ``nodes`` nodes."""

    def ceiling(self, budget: Resources) -> Resources:
        """The most the job's nodes may hold together at any moment (``budget``: its own)."""


class MachineLease:
    """The whole machine, for one job: everything beyond the job's shape is free."""

    def __init__(self, machine: Resources) -> None:
        self.machine = machine

    def free(self, shape: ClusterShape) -> Resources:
        used = shape.total()
        return Resources(max(0.0, self.machine.cpu_cores - used.cpu_cores),
                         max(0, self.machine.memory_bytes - used.memory_bytes))  # fmt: skip

    def reserve(self, total: Resources, nodes: int | None = None) -> str | None:
        return None  # capacity_problem() already refused what the machine cannot hold

    def settle(self, total: Resources, nodes: int | None = None) -> None:
        pass

    def ceiling(self, budget: Resources) -> Resources:
        return budget
