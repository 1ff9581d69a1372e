"""The master's view of each node: lifecycle, pending commands, acknowledgements, counters.

Commands reach a node in the reply to its next message (nodes ask, the master
answers), so the master never blocks on a node. A command is delivered once;
acknowledgements of long commands (a checkpoint written, a state loaded) come
back in later messages and are kept here until an operation looks for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rightsize.core.shape import NodeRole, NodeSpec


class Status(StrEnum):
    """Where a node is in its life. ``launching`` -> ``running`` -> ``stopping`` / ``dead``."""

    LAUNCHING = "launching"
    RUNNING = "running"
    STOPPING = "stopping"
    DEAD = "dead"


@dataclass
class NodeState:
    """One node as the master tracks it."""

    spec: NodeSpec
    pid: int
    launched_s: float
    status: Status = Status.LAUNCHING
    address: str | None = None
    registered_s: float | None = None
    first_step_s: float | None = None
    paused: bool = False
    generation: int = -1
    commands: list[dict[str, Any]] = field(default_factory=list)
    acks: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # role-specific, sent on registering

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def role(self) -> NodeRole:
        return self.spec.role

    @property
    def alive(self) -> bool:
        return self.status in (Status.LAUNCHING, Status.RUNNING)

    def take_commands(self) -> list[dict[str, Any]]:
        commands, self.commands = self.commands, []
        return commands

    def has_ack(self, cmd: str, **match: Any) -> bool:
        return any(self._matches(a, cmd, match) for a in self.acks)

    def pop_acks(self, cmd: str, **match: Any) -> None:
        self.acks = [a for a in self.acks if not self._matches(a, cmd, match)]

    @staticmethod
    def _matches(ack: dict[str, Any], cmd: str, match: dict[str, Any]) -> bool:
        return ack["cmd"] == cmd and all(ack.get(k) == v for k, v in match.items())


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

    def remove(self, name: str) -> None:
        self.by_name.pop(name, None)
