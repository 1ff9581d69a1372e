"""The service's lease books: what each running job may hold, under one capacity.

A runner asks before its job takes more (:mod:`lease`); these books answer from the
scheduler the allocator admits jobs with (cluster/scheduler.py), through its methods
only, under the allocator's lock — so the sum of what running jobs hold never exceeds the
capacity, growth included. A reservation holds the larger of a job's shape before and
after a change until the job settles; nothing is free to grow into while a job waits.

CPU is compared with the rounding slack of the shape's nodes
(``core.shape.rounding_slack``), as the runtime's own check of a plan
(``scaling.plan_check``) does, so a plan that check accepts is not refused here for its
rounding alone.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any

from rightsize.cluster.scheduler import Scheduler
from rightsize.core.resources import Resources
from rightsize.core.shape import rounding_slack

#: The node count assumed for a request that does not say its shape's (the runtime's master
#: sends totals alone): five nodes' rounding, the 0.005 core these books always allowed.
UNCOUNTED_NODES = 5

def slack_of(nodes: int | None) -> float:
    """The CPU a lease request of a shape of ``nodes`` nodes may be over by (its rounding)."""
    return rounding_slack(UNCOUNTED_NODES if nodes is None else nodes)


class LeaseBooks:
    """:class:`lease.Books` over ``scheduler``, each answer under ``lock``.

    Args:
        scheduler: the queues and allocations the allocator admits jobs with.
        lock: the allocator's lock (its loop and the API's calls take it too).
    """

    def __init__(self, scheduler: Scheduler[Any],
                 lock: AbstractContextManager | None = None) -> None:  # fmt: skip
        self.scheduler, self.lock = scheduler, lock or threading.RLock()

    def held(self, job: str) -> Resources:
        with self.lock:
            return self.scheduler.held(job)

    def free_beyond(self, job: str, total: Resources) -> Resources:
        """What ``job`` could hold beyond ``total``: what is free to grow into, and what it
        holds above ``total``."""
        with self.lock:
            held, free = self.scheduler.held(job), self.scheduler.free_for_running()
            return Resources(
                free.cpu_cores + max(0.0, held.cpu_cores - total.cpu_cores),
                free.memory_bytes + max(0, held.memory_bytes - total.memory_bytes),
            )

    def reserve(self, job: str, total: Resources, nodes: int | None = None) -> str | None:
        """Hold the larger of what ``job`` holds and ``total`` (a shape of ``nodes`` nodes),
        if what it grows by is free; None if granted, else why not."""
        slack = slack_of(nodes)
        with self.lock:
            scheduler = self.scheduler
            if not scheduler.holds(job):
                return "the job is not running under this service"
            held, free = scheduler.held(job), scheduler.free_for_running()
            grow = Resources(max(0.0, total.cpu_cores - held.cpu_cores),
                             max(0, total.memory_bytes - held.memory_bytes))  # fmt: skip
            if (grow.cpu_cores > free.cpu_cores + slack
                    or grow.memory_bytes > free.memory_bytes):  # fmt: skip
                waiting = f"; {len(scheduler.waiting)} job(s) wait" if scheduler.waiting else ""
                return (f"the service's capacity: the job needs {grow} more but {free} is free "
                        f"to grow into{waiting}")  # fmt: skip
            larger = Resources(max(held.cpu_cores, total.cpu_cores),
                               max(held.memory_bytes, total.memory_bytes))  # fmt: skip
            scheduler.allocate(job, larger, slack)
            return None

    def settle(self, job: str, total: Resources, nodes: int | None = None) -> None:
        """``job`` now holds ``total`` (a shape of ``nodes`` nodes): the rest of what it
        reserved goes back; more than it holds is never taken by a settle."""
        slack = slack_of(nodes)
        with self.lock:
            held = self.scheduler.held(job)
            if self.scheduler.holds(job) and total.fits_within(held + Resources(slack)):
                self.scheduler.allocate(job, total, slack)
