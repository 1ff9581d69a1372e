"""A starting node borrows the budget's idle CPU until it trains.

A node process spends its first seconds importing torch, building the job's
dataset and model and (a server) its store — seconds of CPU that do not depend
on its share. At a small quota that start-up dominates: on a 2-CPU budget a node
at 0.2 CPU took 13-15 s to launch against 5 s at 0.7, and a worker added at
0.13 CPU took its first step 18 s after launch (issue 17's right-sizing
benchmark, docs/benchmarks.md) — longer than the decisions it was meant to
serve. The budget is the most the job may hold at once, and while nodes start,
part of it is idle. So a node launches with its planned CPU plus an equal share
of what the budget leaves idle (never more than the machine's cores), and the
master gives it its planned quota back once it trains: a server once it serves,
a worker or rank at its first step (:meth:`Master.settle_started`). The job
never holds more than its budget, and a policy's shape is what the node runs at.
"""

from __future__ import annotations

from collections.abc import Sequence

from rightsize.core.resources import Resources
from rightsize.core.shape import NodeSpec


def startup_resources(starting: Sequence[NodeSpec], held_cores: float, budget: Resources,
                      machine_cores: float) -> dict[str, Resources]:  # fmt: skip
    """The resources each of ``starting`` launches with: its own, plus an equal share of the
    budget's CPU that neither the running nodes (``held_cores``) nor the starting ones hold.
    Only nodes that get more are in the result."""
    planned = sum(n.resources.cpu_cores for n in starting)
    idle = budget.cpu_cores - held_cores - planned
    if idle <= 0 or not starting:
        return {}
    share = idle / len(starting)
    boosted = {}
    for node in starting:
        cores = min(node.resources.cpu_cores + share, machine_cores)
        if cores > node.resources.cpu_cores:
            boosted[node.name] = Resources(cores, node.resources.memory_bytes, node.resources.gpus)
    return boosted
