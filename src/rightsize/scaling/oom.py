"""The mechanism's answer to an OOM kill the policy did not fix (DLRover §4.2 as a safety net).

DLRover's Brain relaunches an OOM-killed worker with twice its memory; NEARCHUS
and Optimus size CPU only and say nothing about memory. A mechanism that runs
their plans as they are would relaunch a killed node as it was, to be killed
again (issue 17: a worker at 96 Mi "failed 4 times"). So the mechanism — the
runtime's control loop and the simulator alike — asks the policy first (it sees
the ``oom_killed`` event), and if the policy keeps the shape, doubles the killed
nodes' memory itself, within what the budget (and the cluster) still has. The plan is an ordinary plan, so
the policy sees it in ``Observation.plans`` and the next shape.
"""

from __future__ import annotations

from collections.abc import Mapping

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import Action, Plan


def memory_doubled_after_oom(shape: ClusterShape, killed: Mapping[str, int],
                             memory_left: int | None, by: str = "runtime") -> Plan | None:  # fmt: skip
    """Every node of ``killed`` (name -> its memory when it was killed) that ``shape`` still
    gives no more memory, with twice that memory — at most ``memory_left`` more in all
    (``None``: no limit) — or None if none can grow. ``by`` opens the plan's reason."""
    grown, left = shape, memory_left
    notes = []
    for name, had in sorted(killed.items()):
        if not shape.has_node(name):
            continue
        node = shape.node(name)
        if node.resources.memory_bytes > had:
            continue  # the policy gave it more
        extra = node.resources.memory_bytes if left is None else min(node.resources.memory_bytes, left)
        if extra <= 0:
            continue
        resources = Resources(node.resources.cpu_cores, node.resources.memory_bytes + extra,
                              node.resources.gpus)  # fmt: skip
        grown = grown.with_resources(name, resources)
        left = None if left is None else left - extra
        how = "twice its memory" if extra == node.resources.memory_bytes else "all memory left"
        notes.append(f"{name} OOM-killed: {how}")
    if not notes:
        return None
    return Plan(grown, Action.RELAUNCH_OOM, f"{by}: {'; '.join(notes)} (DLRover §4.2)")
