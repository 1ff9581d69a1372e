"""How a job starts: its own initial shape as it is, or its policy's launch plan.

A job may name the shape it starts with (a job file's ``initial_shape``; a simulated
job's ``TraceJob.initial_shape``). Every mechanism launches that shape as it is, under
every policy — the user's numbers, not the policy's: it is not raised to the memory
floors (the runtime warns where a node is below its floor, and an OOM-killed node is
relaunched bigger, :mod:`scaling.oom`) — and asks the policy only for a job that names
none (``initial_shape: auto``), whose plan the mechanism then raises to the floors like
any other plan (:mod:`scaling.floors`). The runtime (``runtime.startup``) and the
simulator (``cluster.simulator``) both start jobs through :func:`launch_plan`, so a job
started mis-sized on purpose starts alike in both.
"""

from __future__ import annotations

from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import Action, LaunchRequest, Plan, Policy

#: The reason of an explicit start's plan (the runtime's timeline shows it).
INITIAL_SHAPE_REASON = "the shape asked for (initial_shape, or --nproc-per-node)"


def launch_plan(
    policy: Policy, request: LaunchRequest, initial_shape: ClusterShape | None = None
) -> Plan | None:
    """The plan a job starts with: ``initial_shape`` as it is (no notes for the policy: it did
    not plan it), or else the policy's launch plan for ``request`` (``None``: it keeps the job
    waiting)."""
    if initial_shape is not None:
        return Plan(initial_shape, Action.LAUNCH, INITIAL_SHAPE_REASON)
    return policy.launch_plan(request)
