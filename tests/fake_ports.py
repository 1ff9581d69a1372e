"""A job's operations without processes: a fake node port, and a waiter that plays the
nodes' side (they register, obey commands, acknowledge) on a fake clock.

The nodes here do at once what real ones do over the wire: a launched node registers
on the next turn (a parameter server serving its config's generation), obeys
``checkpoint``/``export``/``load``/``stop``/``threads``, and a worker that was told to
pause is paused. Tests steer it: ``die(name)`` ends a node as a failure would, and
``on_turn`` runs test code on every turn of a wait.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.backends.contract import NotInPlace
from rightsize.runtime.backends.local import Exit
from rightsize.runtime.checkpoint import CheckpointDir
from rightsize.runtime.clock import FakeClock, JobClock
from rightsize.runtime.errors import Interrupted, JobFailed
from rightsize.runtime.jobstate import JobState, Phase
from rightsize.runtime.lease import MachineLease
from rightsize.runtime.nodes import NodeState, Status
from rightsize.runtime.operations import JobOperations
from rightsize.runtime.ports import JobPorts, NodeConfig, Settings
from rightsize.runtime.protocol import (
    Ack,
    AckKind,
    Checkpoint,
    Export,
    Load,
    PSConfig,
    Reset,
    Stop,
    Threads,
)
from rightsize.runtime.script_state import ScriptState
from rightsize.runtime.shards import ShardPlan
from rightsize.runtime.state import LaunchRow, StateStore
from rightsize.scaling.api import WorkerRange

GI = 2**30
#: Seconds of fake time one turn of a wait takes (the master's poll).
TURN_S = 0.05


class FakeNodes:
    """The node port: launching adds a node's state, stopping ends it; every call is kept."""

    host_cpus = 8

    def __init__(self, job: JobState, clock: FakeClock) -> None:
        self.job, self.clock = job, clock
        self.launched: list[str] = []
        self.stopped: list[str] = []
        self.resized: list[tuple[str, Resources]] = []
        self.not_in_place: set[str] = set()  # nodes whose host has no room to grow
        self.pid = 100

    def launch(self, node: NodeSpec, config: NodeConfig = None,
               startup: Resources | None = None) -> NodeState:  # fmt: skip
        self.pid += 1
        state = NodeState(node, self.pid, self.clock.now(), config=config, startup=startup)
        self.job.nodes.add(state)
        self.launched.append(node.name)
        return state

    def stop(self, name: str) -> None:
        node = self.job.nodes.get(name)
        if node is not None:
            node.mark_stopping()
            node.move_to(Status.DEAD)
        self.stopped.append(name)

    def resize(self, name: str, resources: Resources) -> int:
        if name in self.not_in_place:
            raise NotInPlace("no room on its host")
        self.resized.append((name, resources))
        return max(1, int(resources.cpu_cores))

    def note(self, name: str, text: str) -> None:
        pass

    def open_rendezvous(self, world: int) -> str:
        return "tcp://127.0.0.1:29500"


class NodesPlayedHere:
    """The waiter: each turn advances the fake clock and lets every live node answer."""

    def __init__(self, job: JobState, clock: FakeClock) -> None:
        self.job, self.clock = job, clock
        self.turns = 0
        self.on_turn: Callable[[], None] = lambda: None

    def wait_until(self, predicate, timeout_s: float, what: str) -> None:
        deadline = self.clock.now() + timeout_s
        while not predicate():
            if self.job.failures:
                raise Interrupted(what)
            if self.clock.now() > deadline:
                raise JobFailed(f"{what} did not happen within {timeout_s:g}s")
            self.turn()

    def turn(self) -> None:
        self.turns += 1
        self.clock.advance(TURN_S)
        self.on_turn()
        for node in list(self.job.nodes.by_name.values()):
            if node.status != Status.DEAD:  # one asked to stop still talks until it ends
                self.answer(node)

    def answer(self, node: NodeState) -> None:
        """What the node does with its messages this turn."""
        if node.status == Status.LAUNCHING:
            node.registered(self.clock.now(), f"tcp://127.0.0.1:{node.pid}")
            if isinstance(node.config, PSConfig):
                node.works_in(node.config.generation)
            return
        node.set_paused(self.job.phase == Phase.HALTED)
        for command in node.take_commands():
            if isinstance(command, Checkpoint):
                node.acks.append(Ack(AckKind.CHECKPOINTED, version=command.version))
            elif isinstance(command, Export):
                node.acks.append(Ack(AckKind.EXPORTED, generation=command.generation))
            elif isinstance(command, Load):
                node.works_in(command.generation)
            elif isinstance(command, Stop):
                node.move_to(Status.DEAD)
                return
            elif not isinstance(command, (Threads, Reset)):
                raise AssertionError(f"{node.name} got {command}")
        if node.role == NodeRole.WORKER and node.first_step_s is None:
            node.first_step_s = self.clock.now()

    def die(self, name: str, returncode: int = -9) -> None:
        """``name`` ends as a failure does: dead, and its exit waiting to be handled."""
        self.job.nodes.get(name).move_to(Status.DEAD)
        self.job.failed(Exit(name, returncode, oom_killed=False))


class FakeWorld:
    """A job's operations over fake ports, with the state file and checkpoint directory
    in ``tmp``."""

    def __init__(self, tmp: Path, shape: ClusterShape, strategy: Strategy = Strategy.PS,
                 lease: MachineLease | None = None, script: bool = False) -> None:  # fmt: skip
        self.clock = FakeClock(1000.0)
        if script:  # the user's own script: no shards, no tensors
            self.job = JobState(None, Strategy.ALLREDUCE, {}, script=ScriptState())
        else:
            sizes = {"w1": 400, "w2": 300, "b": 100}
            self.job = JobState(ShardPlan(64, 16, 8, epochs=1), strategy, sizes)
        self.nodes = FakeNodes(self.job, self.clock)
        self.waiter = NodesPlayedHere(self.job, self.clock)
        self.store = StateStore(tmp / "state.db")
        self.store.start_job("fake", {}, "fake", self.clock.now(),
                             LaunchRow(shape, "launch", "the launch", {}))  # fmt: skip
        settings = Settings("fake", Resources(16, 64 * GI), Resources(16, 64 * GI),
                            WorkerRange(1, None), startup_timeout_s=10.0, max_restarts=2,
                            startup_allowance=False, log_dir=tmp / "logs")  # fmt: skip
        self.lease = lease or MachineLease(Resources(16, 64 * GI))
        self.ops = JobOperations(JobPorts(self.job, self.nodes, self.waiter, self.store,
                                          CheckpointDir(tmp / "ckpt"), JobClock(self.clock),
                                          self.lease, settings))  # fmt: skip
        self.shape = shape

    def launch(self) -> None:
        assert self.ops.launch_job(self.shape, None) == ""

    def timeline(self) -> list[tuple[str, bool]]:
        """The rows after the launch: (action, applied)."""
        return [(row["action"], bool(row["applied"])) for row in self.store.timeline()[1:]]
