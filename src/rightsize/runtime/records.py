"""The runtime's records at its boundaries: a progress reading, a timeline row, a report.

Each is frozen, names its units in its fields (``time_s``, ``samples_per_s``,
``memory_used_bytes``), and has ``to_json()`` giving exactly the dict the state file
and the report have always held (readers outside runtime/ still read those dicts);
``from_json`` reads one back and refuses what it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rightsize.scaling.api import Action


class TimelineAction(StrEnum):
    """What the mechanism itself did, on the timeline beside the policy's :class:`Action`."""

    RESUME = "resume"  # a master took over an unfinished job
    RESTORE_PS = "restore_ps"  # every server back to the latest checkpoint
    RELAUNCH_WORKER = "relaunch_worker"  # a dead worker relaunched
    RESTART_GROUP = "restart_group"  # an allreduce group (or a script's) restarted after a failure
    INTERRUPT = "interrupt"  # a signal stopped the job


def timeline_action(value: str) -> Action | TimelineAction:
    """Raises ValueError: neither a policy's action nor the mechanism's."""
    try:
        return Action(value)
    except ValueError:
        return TimelineAction(value)


@dataclass(frozen=True)
class TimelineRow:
    """One change of shape (or one refused, declined or cut short), in the state file."""

    time_s: float  # since the job started
    action: Action | TimelineAction
    reason: str
    shape: dict[str, Any]  # ClusterShape.to_dict()
    applied: bool
    transition_s: float | None  # how long carrying it out took (None: not carried out)
    details: dict[str, Any]  # the mechanism's measured parts
    notes: dict[str, Any]  # the plan's own details

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TimelineRow:
        return cls(data["time_s"], timeline_action(data["action"]), data["reason"],
                   data["shape"], bool(data["applied"]), data["transition_s"],
                   data["details"], data["notes"])  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"time_s": self.time_s, "action": str(self.action), "reason": self.reason,
                "shape": self.shape, "applied": self.applied, "transition_s": self.transition_s,
                "details": self.details, "notes": self.notes}  # fmt: skip


@dataclass(frozen=True)
class NodeReading:
    """One node over one metric interval."""

    name: str
    role: str
    cpu_used_cores: float
    cpu_allocated_cores: float
    memory_used_bytes: int
    memory_allocated_bytes: int
    net_in_bytes_per_s: float
    net_out_bytes_per_s: float
    steps_per_s: float | None

    #: the field each JSON key holds (the state file's names, which carry no units)
    JSON_KEYS = {"name": "name", "role": "role", "cpu_used": "cpu_used_cores",
                 "cpu_allocated": "cpu_allocated_cores", "memory_used": "memory_used_bytes",
                 "memory_allocated": "memory_allocated_bytes", "net_in": "net_in_bytes_per_s",
                 "net_out": "net_out_bytes_per_s", "steps_per_s": "steps_per_s"}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeReading:
        return cls(**{field: data[key] for key, field in cls.JSON_KEYS.items()})

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, field) for key, field in self.JSON_KEYS.items()}


@dataclass(frozen=True)
class ProgressStatus:
    """One metric interval of the job: a line of the progress display, a row of the state
    file's samples, an entry of the report's throughput series."""

    time_s: float  # since the job started
    epoch: int | None  # None: a script without an ElasticSampler
    steps_done: int
    steps_total: int | None  # None where the length is not known
    steps_per_s: float
    samples_per_s: float
    loss: float | None
    e_job: float | None  # the job's efficiency (useful work over allocated CPU)
    shape: str  # the shape, described
    nodes: tuple[NodeReading, ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgressStatus:
        """The status a state file holds; the fields a status may lack (an earlier version's
        file: no epoch, total, loss, efficiency or shape) read as unknown."""
        nodes = tuple(NodeReading.from_json(n) for n in data["nodes"])
        return cls(data["time_s"], data.get("epoch"), data["steps_done"],
                   data.get("steps_total"), data["steps_per_s"], data["samples_per_s"],
                   data.get("loss"), data.get("e_job"), data.get("shape", ""), nodes)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"time_s": self.time_s, "epoch": self.epoch, "steps_done": self.steps_done,
                "steps_total": self.steps_total, "steps_per_s": self.steps_per_s,
                "samples_per_s": self.samples_per_s, "loss": self.loss, "e_job": self.e_job,
                "shape": self.shape, "nodes": [n.to_json() for n in self.nodes]}  # fmt: skip


@dataclass(frozen=True)
class Report:
    """A finished job's report (:mod:`report` builds it)."""

    job: str
    workload: str
    strategy: str
    policy: str
    isolation: str  # how nodes were confined (backends.contract.IsolationMode)
    wall_time_s: float
    headline: dict[str, Any]  # steps, samples, epochs, their accounting (report.py)
    final_shape: dict[str, Any]
    timeline: tuple[TimelineRow, ...]
    moves: tuple[dict[str, Any], ...]
    transitions: tuple[dict[str, Any], ...]
    throughput: tuple[dict[str, Any], ...]
    nodes: dict[str, dict[str, Any]]  # per node: mean CPU used and allocated, peak memory...
    masters_restarted: int
    node_restarts: dict[str, int]
    events: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "workload": self.workload,
            "strategy": self.strategy,
            "policy": self.policy,
            "isolation": self.isolation,
            "wall_time_s": self.wall_time_s,
            **self.headline,
            "final_shape": self.final_shape,
            "timeline": [row.to_json() for row in self.timeline],
            "moves": list(self.moves),
            "transitions": list(self.transitions),
            "throughput": list(self.throughput),
            "nodes": self.nodes,
            "restarts": {"masters": self.masters_restarted, "nodes": dict(self.node_restarts),
                         "events": list(self.events)},  # fmt: skip
        }
