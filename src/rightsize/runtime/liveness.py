"""Liveness: a node that stops talking is failed and replaced, not waited for forever.

A node's main loop talks to the master all the time — a worker at least once
per step (its progress report; every 50 ms when idle), a parameter server every
``HEARTBEAT_S`` (0.1 s) between requests — so silence means the process is
stopped (SIGSTOP), deadlocked or thrashing. A node silent for longer than the
liveness timeout is SIGKILLed and handled like any failure (relaunched, or
restored from the latest checkpoint); its event says it was unresponsive.

The timeout follows the job's step time, so a slow model is not mistaken for a
frozen one: ``max(floor_s, step_multiple × the slowest worker's step time)``,
a step's time being what the worker itself spent inside it (idle time between
leases, or waiting at an epoch's end, is not a slow step),
or the job file's ``runtime.liveness_timeout``. Until a node has shown it works
(a server serving a generation, a worker's first step), the limit is
``runtime.startup_timeout``: loading torch and building a model are silent.
If the master itself was not running for a while (stopped, or busy in a long
system call), that time is not held against the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rightsize.core.shape import NodeRole
from rightsize.runtime.nodes import NodeState, Status

#: The shortest derived timeout: long enough for a server to load or export a large model.
LIVENESS_FLOOR_S = 10.0
#: The derived timeout is this many times the slowest worker's step time.
LIVENESS_STEP_MULTIPLE = 20.0
#: A gap between two turns of the master's loop longer than this is credited to the nodes.
MASTER_GAP_S = 1.0


@dataclass(frozen=True)
class LivenessRule:
    """When a node counts as unresponsive.

    Attributes:
        startup_s: the limit before a node has shown it works (``runtime.startup_timeout``).
        timeout_s: a fixed limit afterwards (``runtime.liveness_timeout``); None derives it.
        floor_s: the shortest derived limit.
        step_multiple: the derived limit in step times of the slowest worker.
    """

    startup_s: float
    timeout_s: float | None = None
    floor_s: float = LIVENESS_FLOOR_S
    step_multiple: float = LIVENESS_STEP_MULTIPLE

    def limit_s(self, step_times_s: Iterable[float]) -> float:
        """The limit for a node that works, given the workers' seconds per step when busy."""
        if self.timeout_s is not None:
            return self.timeout_s
        steps = list(step_times_s)
        if not steps:
            return self.startup_s
        return max(self.floor_s, self.step_multiple * max(steps))


def has_started(node: NodeState) -> bool:
    """The node has shown it works: a server serves a generation, a worker made a step."""
    if node.role == NodeRole.PS:
        return node.generation is not None
    return node.first_step_s is not None


def silent_nodes(nodes: Iterable[NodeState], now: float, rule: LivenessRule,
                 step_times_s: Iterable[float]) -> list[tuple[NodeState, float]]:  # fmt: skip
    """Live nodes silent past their limit, with how long each has been silent."""
    limit = rule.limit_s(step_times_s)
    found = []
    for node in nodes:
        if node.status not in (Status.LAUNCHING, Status.RUNNING):
            continue
        since = node.heard_s if node.heard_s is not None else node.launched_s
        allowed = limit if has_started(node) else rule.startup_s
        if now - since > allowed:
            found.append((node, now - since))
    return found


def credit_gap(nodes: Iterable[NodeState], gap_s: float) -> None:
    """The master was away for ``gap_s``: nobody could be heard meanwhile."""
    for node in nodes:
        if node.heard_s is not None:
            node.heard_s += gap_s
        node.launched_s += gap_s
