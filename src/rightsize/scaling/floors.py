"""Memory floors: every planned node raised to what it must hold, by every mechanism.

A policy sizes CPU (NEARCHUS, Optimus) or estimates memory from what it saw (DLRover's
default and observed memory, §4.2); what a node must hold comes from the model — its
parameters, their optimizer state, a worker's step — and a node given less is
OOM-killed (issue 17: a wide-deep PS launched at 15% of the budget's memory was killed
at every first checkpoint). So the mechanism raises every node of a plan below its
floor to it before applying the plan; the policy sees the raised plan in
``Observation.plans`` and the shape that follows. The mechanisms know the floors in
their own way — the runtime from the real model (``runtime.memory_need``, measured with
torch), the simulator from its job model (``cluster.jobmodel``) — and apply them by
this one rule. A node the floors do not name keeps its memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.units import format_bytes
from rightsize.scaling.api import Plan


def raised_to_floors(shape: ClusterShape, floors: Mapping[str, int]) -> ClusterShape:
    """``shape`` with every node ``floors`` names given at least its floor in bytes (the same
    shape object if none is below)."""
    for name, floor in floors.items():
        node = shape.node(name)
        if node.resources.memory_bytes < floor:
            shape = shape.with_resources(
                name, Resources(node.resources.cpu_cores, floor, node.resources.gpus)
            )
    return shape


def floored_plan(plan: Plan, floors: Mapping[str, int]) -> Plan:
    """``plan`` with its shape raised to ``floors`` and the raise said in its reason (the same
    plan object if no node was below its floor)."""
    shape = raised_to_floors(plan.shape, floors)
    if shape is plan.shape:
        return plan
    raised = ", ".join(
        f"{n.name} {format_bytes(plan.shape.node(n.name).resources.memory_bytes)}"
        f"->{format_bytes(n.resources.memory_bytes)}"
        for n in shape.nodes
        if n.resources != plan.shape.node(n.name).resources
    )
    return replace(plan, shape=shape, reason=f"{plan.reason}; memory raised to floors: {raised}")
