"""The steps every operation of a job is made of: launch nodes in waves, wait for them to
stop, commit a checkpoint, record a timeline row, start a new cluster generation.

:mod:`lifecycle`, :mod:`elastic` and :mod:`script_group` compose these; each step moves
the job's state through its own methods and touches the world only through the ports
(:mod:`ports`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.runtime.allowance import startup_resources
from rightsize.runtime.capacity import launch_wave
from rightsize.runtime.checkpoint import KEEP_VERSIONS
from rightsize.runtime.errors import JobFailed
from rightsize.runtime.nodes import NodeState, Status
from rightsize.runtime.ports import JobPorts, NodeConfig
from rightsize.runtime.protocol import AckKind, Stop
from rightsize.runtime.records import TimelineAction
from rightsize.runtime.state import CheckpointRow
from rightsize.scaling.api import Action

#: Seconds a node asked to stop may take before it is killed.
STOP_GRACE_S = 30.0


class Steps:
    """The shared steps, over one job's ports."""

    def __init__(self, ports: JobPorts) -> None:
        self.ports = ports
        self.job, self.nodes, self.clock = ports.job, ports.nodes, ports.clock
        self.timeline, self.settings = ports.timeline, ports.settings

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Serve the nodes until ``predicate()`` (:class:`ports.Waiter`)."""
        self.ports.waiter.wait_until(predicate, timeout_s, what)

    # -- the timeline ---------------------------------------------------------------------
    def record(self, action: Action | TimelineAction | str, reason: str, started_s: float,
               notes: dict | None = None, **details: Any) -> float:  # fmt: skip
        """Add a timeline row for the current shape; returns the transition time.

        ``details`` are the mechanism's measured parts; ``notes`` the plan's own details.
        """
        transition = self.clock.now() - started_s
        self.timeline.record_shape(self.clock.time_s(), str(action), reason, self.job.shape,
                                   True, transition, _rounded(details), notes)  # fmt: skip
        return transition

    def record_not_applied(self, action: Action | TimelineAction | str, reason: str,
                           shape: ClusterShape) -> None:  # fmt: skip
        self.timeline.record_shape(self.clock.time_s(), str(action), reason, shape, False)

    def bump_generation(self) -> int:
        generation = self.job.next_generation()
        self.timeline.update_job(generation=generation)
        return generation

    # -- launching --------------------------------------------------------------------------
    def start_nodes(self, nodes: Sequence[tuple[NodeSpec, NodeConfig]], what: str) -> None:
        """Launch ``nodes`` in waves of :func:`capacity.launch_wave`, each wave waiting until
        its nodes have registered (so a large shape never starts all its processes at once)."""
        wave = launch_wave(self.settings.machine)
        for i in range(0, len(nodes), wave):
            batch = nodes[i : i + wave]
            startup = self._startup_resources([spec for spec, _ in batch])
            for spec, config in batch:
                self.nodes.launch(spec, config, startup.get(spec.name))
            names = [spec.name for spec, _ in batch]
            self.wait_until(lambda names=names: self.all_registered(names),
                            self.settings.startup_timeout_s, what)  # fmt: skip

    def _startup_resources(self, starting: list[NodeSpec]) -> dict:
        """What each starting node borrows from the idle CPU the job may hold
        (:mod:`allowance`): its budget alone on a machine, what it reserved under the
        service (:mod:`lease`)."""
        if not self.settings.startup_allowance:
            return {}
        held = sum((n.startup or n.spec.resources).cpu_cores for n in self.job.nodes.alive())
        return startup_resources(starting, held, self.ports.lease.ceiling(self.settings.budget),
                                 self.nodes.host_cpus)  # fmt: skip

    def all_registered(self, names: Sequence[str]) -> bool:
        """Every named node has registered, and every parameter server among them serves
        (has loaded its share: a repartition must not halt the workers while a new server is
        still building its store — DLRover §5.3: "workers do not wait for the creation and
        initialization of new PS")."""
        return all(
            (n := self.job.nodes.get(name)) is not None
            and n.status == Status.RUNNING
            and (n.role != NodeRole.PS or n.generation is not None)
            for name in names
        )

    # -- checkpoints ------------------------------------------------------------------------
    def commit(self, version: int, snapshot: dict, files: dict, steps: int) -> None:
        """Version ``version`` is on disk: commit it with the queues' ``snapshot``, keep the
        latest :data:`KEEP_VERSIONS`."""
        job = self.job
        row = CheckpointRow(version, self.clock.time_s(), snapshot, files, dict(job.placement),
                            steps)  # fmt: skip
        self.timeline.commit_checkpoint(row)
        keep = set(self.timeline.checkpoint_versions()[-KEEP_VERSIONS:])
        self.timeline.forget_checkpoints(keep)
        self.ports.ckpt.prune(keep)
        for node in job.nodes.alive():
            node.pop_acks(AckKind.CHECKPOINTED, version=version)

    # -- stopping ---------------------------------------------------------------------------
    def stop_all(self, nodes: list[NodeState]) -> None:
        """Ask ``nodes`` to stop at their next message and wait for them to end."""
        for node in nodes:
            node.commands.append(Stop())
            node.mark_stopping()
        self.wait_ended()

    def wait_ended(self) -> None:
        """Wait for the nodes asked to stop to exit; kill those that take longer than the
        grace."""
        stopping = [n for n in self.job.nodes.by_name.values() if n.status == Status.STOPPING]
        try:
            self.wait_until(lambda: all(n.status == Status.DEAD for n in stopping), STOP_GRACE_S,
                            "the nodes stopping")  # fmt: skip
        except JobFailed:  # too slow: killed below
            pass
        finally:
            for node in stopping:
                self.nodes.stop(node.name)


def _rounded(details: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in details.items()}
