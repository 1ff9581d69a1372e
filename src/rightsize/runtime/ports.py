"""The narrow ports a job's operations are built from (:class:`operations.JobOperations`).

The operations — launch, checkpoint, recover, carry out a plan, finish — move the
job's state (:class:`jobstate.JobState`) and use the world only through these:

- :class:`NodePort`: start, stop, signal and resize a node's process, and open a
  rendezvous for a group of ranks (the master's backend and server behind it);
- :class:`Waiter`: serve the nodes until something holds (the master's message pump);
- :class:`Timeline`: the state file's rows the operations write (the shapes applied,
  the cluster generation, committed checkpoints);
- the checkpoint directory (:class:`checkpoint.CheckpointDir`), the job's clock
  (:class:`clock.JobClock`), the capacity lease (:class:`lease.CapacityLease`) and
  :class:`Settings`, the job file's numbers they need.

So a test drives the operations with a fake clock and a fake node port, no processes
(tests/test_runtime_operations.py), as tests/test_runtime_control.py drives the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeSpec
from rightsize.runtime.checkpoint import CheckpointDir
from rightsize.runtime.clock import JobClock
from rightsize.runtime.jobstate import JobState
from rightsize.runtime.lease import CapacityLease
from rightsize.runtime.nodes import NodeState
from rightsize.runtime.protocol import PSConfig, RankConfig, ScriptConfig
from rightsize.runtime.state import CheckpointRow
from rightsize.scaling.api import WorkerRange

#: What a node gets on registering: a server's share, a rank's group, a script rank's.
NodeConfig = PSConfig | RankConfig | ScriptConfig | None


class NodePort(Protocol):
    """The job's node processes, as the operations start and end them."""

    #: CPUs of the largest host a node can land on (a starting node's borrowed CPU is capped)
    host_cpus: int

    def launch(self, node: NodeSpec, config: NodeConfig = None,
               startup: Resources | None = None) -> NodeState:  # fmt: skip
        """Start ``node``'s process (with ``startup``'s larger resources until it trains);
        returns its state, already in the job's nodes."""

    def stop(self, name: str) -> None:
        """End the node's process now; its state (if any) is dead after."""

    def resize(self, name: str, resources: Resources) -> int:
        """New CPU quota and memory limit in place; returns its torch thread count.

        Raises:
            NotInPlace: the node must be relaunched to get them (its host has no room).
        """

    def note(self, name: str, text: str) -> None:
        """A line in the node's log."""

    def open_rendezvous(self, world: int) -> str:
        """A fresh store for a group of ``world`` ranks: ``tcp://host:port``."""


class Waiter(Protocol):
    def wait_until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Serve the nodes until ``predicate()``.

        Raises:
            StopRequested: a signal asked the job to stop.
            Interrupted: a node of the shape died meanwhile.
            JobFailed: ``timeout_s`` passed.
        """


class Timeline(Protocol):
    """The rows of the state file the operations write (:class:`state.StateStore`)."""

    def record_shape(self, time_s: float, action: str, reason: str, shape: ClusterShape,
                     applied: bool = True, transition_s: float | None = None,
                     details: dict | None = None,
                     notes: dict | None = None) -> int: ...  # fmt: skip
    def repeats_last(self, action: str, reason: str, shape: ClusterShape) -> bool: ...
    def update_job(self, **fields: Any) -> None: ...
    def commit_checkpoint(self, row: CheckpointRow) -> None: ...
    def latest_checkpoint(self) -> CheckpointRow | None: ...
    def checkpoint_versions(self) -> list[int]: ...
    def forget_checkpoints(self, keep: set[int]) -> None: ...


@dataclass(frozen=True)
class Settings:
    """The job file's numbers the operations need, and the names its processes carry."""

    name: str
    budget: Resources
    machine: Resources  # what the job may span: launch waves are sized on it
    worker_range: WorkerRange
    startup_timeout_s: float
    max_restarts: int
    startup_allowance: bool
    log_dir: Path  # the nodes' logs, on this host
    run_token: str = ""  # names this run's stores and torchrun's TORCHELASTIC_RUN_ID
    script: str | None = None  # the user's own script, if the job runs one


@dataclass
class JobPorts:
    """Everything the operations touch besides themselves."""

    job: JobState
    nodes: NodePort
    waiter: Waiter
    timeline: Timeline
    ckpt: CheckpointDir
    clock: JobClock
    lease: CapacityLease
    settings: Settings
