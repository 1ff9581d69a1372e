"""A job's operations as one object: :class:`JobOperations`, built from narrow ports.

Launch, checkpoint, recover, carry out a plan, finish: each moves the job's state
(:class:`jobstate.JobState`, through its methods) and touches the world only through
the ports of :mod:`ports` (a node port, a waiter, the state file's timeline, the
checkpoint directory, the clock, the lease, the job's settings). The master builds
it once its backend and server are open and drives it from the control loop; nothing
here knows the master. Its parts, each over the same ports:

- :mod:`steps`: the steps every operation is made of (launch waves, commits, stops);
- :mod:`script_group`: a script's group of ranks, by torchrun's contract;
- :mod:`lifecycle`: launch, checkpoint, recovery, the end;
- :mod:`elastic`: a policy's plan carried out.
"""

from __future__ import annotations

from typing import Any

from rightsize.core.shape import ClusterShape
from rightsize.runtime.backends.local import Exit
from rightsize.runtime.control import Transition
from rightsize.runtime.elastic import Elastic
from rightsize.runtime.lifecycle import Lifecycle
from rightsize.runtime.nodes import NodeState
from rightsize.runtime.ports import JobPorts
from rightsize.runtime.records import TimelineAction
from rightsize.runtime.script_group import ScriptGroup
from rightsize.runtime.state import CheckpointRow
from rightsize.runtime.steps import Steps
from rightsize.scaling.api import Action, Plan


class JobOperations:
    """Everything the master does to a running job, over ``ports``."""

    def __init__(self, ports: JobPorts) -> None:
        self.ports = ports
        self.job = ports.job
        self.steps = Steps(ports)
        self.group = ScriptGroup(self.steps)
        self.lifecycle = Lifecycle(self.steps, self.group)
        self.elastic = Elastic(self.steps, self.lifecycle)

    # -- the job's life -------------------------------------------------------------------
    def launch_job(self, shape: ClusterShape, row: CheckpointRow | None) -> str:
        """Start ``shape`` from checkpoint ``row`` (None: from scratch); a note for the
        timeline's reason ("" when every node started)."""
        return self.lifecycle.launch_job(shape, row)

    def checkpoint(self, stop: bool = False) -> int | None:
        """A consistent checkpoint, committed; its version (None if none could be made)."""
        return self.lifecycle.checkpoint(stop)

    def recover(self) -> None:
        """Bring back the shape's dead nodes (counting their restarts)."""
        self.lifecycle.recover()

    def apply_plan(self, plan: Plan) -> Transition:
        """Carry out ``plan``; what happened and how long it took."""
        return self.elastic.apply_plan(plan)

    def finish(self) -> None:
        """Stop the nodes around the final checkpoint."""
        self.lifecycle.finish()

    def wait_ended(self) -> None:
        """Wait for the nodes asked to stop; kill those past the grace."""
        self.steps.wait_ended()

    def record(self, action: Action | TimelineAction, reason: str, started_s: float,
               **details: Any) -> float:  # fmt: skip
        """A timeline row for the current shape, applied; returns the transition time."""
        return self.steps.record(action, reason, started_s, **details)

    def record_not_applied(self, action: Action | TimelineAction | str, reason: str,
                           shape: ClusterShape) -> None:  # fmt: skip
        """A timeline row for a shape that was not applied (declined, interrupted)."""
        self.steps.record_not_applied(action, reason, shape)

    # -- a script's group -------------------------------------------------------------------
    def steps_done(self) -> int:
        """Batches trained (summed over workers); a script's optimizer steps (its groups')."""
        if self.job.script is not None:
            return self.group.steps_done()
        return self.job.shards.batches_done

    def settle_group(self) -> None:
        """A script's group: its first step's time, once every rank took one."""
        if self.job.script is not None:
            self.group.settle()

    def unsaved_s(self) -> float:
        """A script's training since its last save: what stopping its group throws away."""
        return self.group.unsaved_s()

    def check_started(self, exit_: Exit, node: NodeState, resumed: bool) -> None:
        """Raises ScriptFailedAtStart: a rank failed before the script ever took a step."""
        self.group.check_started(exit_, node, resumed)
