"""The master's view of each node: lifecycle, pending commands, acknowledgements, counters.

Commands reach a node in the reply to its next message (nodes ask, the master
answers), so the master never blocks on a node. A command is delivered once;
acknowledgements of long commands (a checkpoint written, a state loaded) come
back in later messages and are kept here until an operation looks for them.
Every message also refreshes when the node was last heard from, which is how a
frozen node is told from a slow one (:mod:`liveness`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rightsize.core.resources import Resources
from rightsize.core.shape import NodeRole, NodeSpec
from rightsize.core.units import format_bytes
from rightsize.runtime.backends.local import Exit
from rightsize.runtime.protocol import Ack, AckKind, Command, PSConfig, RankConfig, Stats

#: How fast a node's remembered long step decays, per progress report.
STEP_DECAY = 0.95


class Status(StrEnum):
    """Where a node is in its life: ``launching`` -> ``running`` -> ``stopping`` -> ``dead``
    (or straight to ``dead`` when it fails)."""

    LAUNCHING = "launching"
    RUNNING = "running"
    STOPPING = "stopping"
    DEAD = "dead"


#: The moves a node's status may make, as (from, to): DLRover's ``NODE_STATE_FLOWS`` idea,
#: an explicit table checked on every move, so that no operation resurrects a node it
#: stopped. A move not listed is a programming error (:class:`IllegalNodeTransition`).
NODE_FLOWS: frozenset[tuple[Status, Status]] = frozenset({
    (Status.LAUNCHING, Status.RUNNING),  # it registered
    (Status.LAUNCHING, Status.STOPPING),  # asked to stop before it registered
    (Status.LAUNCHING, Status.DEAD),  # died (or was killed) while starting
    (Status.RUNNING, Status.STOPPING),
    (Status.RUNNING, Status.DEAD),  # a failure: nobody asked it to end
    (Status.STOPPING, Status.DEAD),
    (Status.DEAD, Status.DEAD),  # stopped again, or its exit heard after it was marked dead
})  # fmt: skip


class IllegalNodeTransition(RuntimeError):
    """An operation moved a node to a status its current one does not lead to."""


@dataclass
class NodeState:
    """One node as the master tracks it.

    ``generation`` is the cluster generation the node last said it works in: for a
    parameter server the one it serves, for a worker the one of the cluster it was
    given (``None`` until it has one), for a rank the group it belongs to.
    """

    spec: NodeSpec
    pid: int
    launched_s: float
    config: PSConfig | RankConfig | None = None  # sent on registering
    status: Status = Status.LAUNCHING
    address: str | None = None
    registered_s: float | None = None
    first_step_s: float | None = None
    heard_s: float | None = None  # the last message
    counted_s: float | None = None  # when the last counted step or update ended
    unresponsive_s: float | None = None  # silent this long when the master gave up on it
    step_s: float | None = None  # a recent long step (see heard)
    paused: bool = False
    startup: Resources | None = None  # launched with more than its spec, until it trains
    generation: int | None = None
    commands: list[Command] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "status" and "status" in self.__dict__:
            raise AttributeError("a node's status changes only through NodeState.move_to")
        object.__setattr__(self, name, value)

    def move_to(self, status: Status) -> None:
        """Raises IllegalNodeTransition for a move :data:`NODE_FLOWS` does not allow."""
        if (self.status, status) not in NODE_FLOWS:
            raise IllegalNodeTransition(f"{self.name} cannot go from {self.status} to {status}")
        object.__setattr__(self, "status", status)

    def registered(self, now: float, address: str | None) -> None:
        """It registered (serving at ``address``, a server). One asked to stop meanwhile stays
        stopping."""
        if self.status == Status.LAUNCHING:
            self.move_to(Status.RUNNING)
        self.registered_s, self.address = now, address

    def works_in(self, generation: int | None) -> None:
        """The cluster generation its latest message says it works in."""
        self.generation = generation

    def set_paused(self, paused: bool) -> None:
        """A worker halted at a batch boundary (a repartition), or training again."""
        self.paused = paused

    def given_up(self, silent_s: float) -> None:
        """Silent for ``silent_s``: the master kills it, and its exit says why."""
        self.unresponsive_s = silent_s

    def resized(self, spec: NodeSpec) -> None:
        """Resized in place to a plan's ``spec``, which replaces a start-up allowance."""
        self.spec, self.startup = spec, None

    def mark_stopping(self) -> None:
        """Asked to stop: a live node is now stopping (a dead one stays dead)."""
        if self.alive:
            self.move_to(Status.STOPPING)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def role(self) -> NodeRole:
        return self.spec.role

    @property
    def alive(self) -> bool:
        return self.status in (Status.LAUNCHING, Status.RUNNING)

    def heard(self, now: float, stats: Stats) -> None:
        """A message arrived, with the node's counters.

        ``step_s`` follows the node's own step length (time inside steps over steps, so
        idle time between leases does not count): a new longer step takes over at once,
        shorter ones bring it down by :data:`STEP_DECAY` per report.
        """
        if self.first_step_s is None and stats.steps > 0:
            self.first_step_s = now
        steps = stats.steps - self.stats.steps
        if steps > 0 or stats.updates > self.stats.updates:
            self.counted_s = now - (stats.counted_age_s or 0.0)
        if steps > 0:
            length = max(0.0, stats.busy_s - self.stats.busy_s) / steps
            self.step_s = length if self.step_s is None else max(length, STEP_DECAY * self.step_s)
        self.heard_s, self.stats = now, stats

    def take_commands(self) -> tuple[Command, ...]:
        commands, self.commands = tuple(self.commands), []
        return commands

    def has_ack(self, kind: AckKind, **match: Any) -> bool:
        return any(_matches(a, kind, match) for a in self.acks)

    def pop_acks(self, kind: AckKind, **match: Any) -> None:
        self.acks = [a for a in self.acks if not _matches(a, kind, match)]


def _matches(ack: Ack, kind: AckKind, match: dict[str, Any]) -> bool:
    return ack.kind == kind and all(getattr(ack, k) == v for k, v in match.items())


class Nodes:
    """All nodes of the job, by name (a relaunched node replaces its predecessor)."""

    def __init__(self) -> None:
        self.by_name: dict[str, NodeState] = {}

    def add(self, state: NodeState) -> None:
        self.by_name[state.name] = state

    def get(self, name: str) -> NodeState | None:
        return self.by_name.get(name)

    def alive(self, role: NodeRole | None = None) -> list[NodeState]:
        return [n for n in self.by_name.values() if n.alive and (role is None or n.role == role)]

    def running(self, role: NodeRole | None = None) -> list[NodeState]:
        return [n for n in self.alive(role) if n.status == Status.RUNNING]

    def is_alive(self, name: str) -> bool:
        node = self.by_name.get(name)
        return node is not None and node.alive


def describe_exit(exit_: Exit, node: NodeState | None) -> str:
    """How a node ended, in words: OOM-killed at its limit, unresponsive, a signal, a code."""
    if exit_.oom_killed:
        limit = node.spec.resources.memory_bytes if node else None
        return f"OOM-killed at its memory limit of {format_bytes(limit)}" if limit else "OOM-killed"
    if node is not None and node.unresponsive_s is not None:
        return f"unresponsive for {node.unresponsive_s:.1f}s (liveness timeout); killed"
    if exit_.returncode < 0:
        try:
            return f"killed by {signal.Signals(-exit_.returncode).name}"
        except ValueError:
            return f"killed by signal {-exit_.returncode}"
    return f"exit code {exit_.returncode}"
