"""The state of one running job, as its master knows it, with its phases and transitions.

Everything about the job that changes while it runs lives here — the shape and
its nodes, the phase, the cluster generation and checkpoint version, the tensor
placement, the shard queues, failures not yet handled, restarts — so that the
master's operations (:mod:`lifecycle`, :mod:`elastic`) and its answers to nodes
(:mod:`rpc`) share one typed object instead of reaching into the master. The
phases follow the model of torch.distributed.elastic's ``WorkerState``: an enum
with its allowed transitions written down (:data:`TRANSITIONS`) and checked on
every move, so an operation that leaves the job in a phase nobody planned
fails loudly instead of silently serving the wrong answers.

::

    LAUNCHING --> TRAINING <--> HALTED          (a parameter-server repartition)
        |            |  ^         |
        |            v  |         |
        +-------> RESTORING <-----+              (servers reload the last checkpoint)
    TRAINING --> FINISHING --> FINISHED
    any live phase --> FAILED | INTERRUPTED      (a node failing too often; SIGINT/SIGTERM)

Leases are handed out only in ``TRAINING``. A restore that another death
interrupts leaves the phase at ``RESTORING``, which is how the next recovery
knows to redo it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.backends.local import Exit
from rightsize.runtime.nodes import Nodes
from rightsize.runtime.partition import names_on, partition_by_bytes
from rightsize.runtime.protocol import ClusterView
from rightsize.runtime.script_state import ScriptState
from rightsize.runtime.shards import ShardManager, ShardPlan


class Phase(StrEnum):
    LAUNCHING = "launching"  # starting the shape's nodes (a new, resumed or restarted group)
    TRAINING = "training"  # leases open
    RESTORING = "restoring"  # parameter servers reloading the latest checkpoint; leases closed
    HALTED = "halted"  # workers paused at a batch boundary for a repartition
    FINISHING = "finishing"  # workers stopped, final checkpoint, servers stopping
    FINISHED = "finished"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # stopped by a signal; the next run resumes


_LIVE_ENDS = {Phase.FAILED, Phase.INTERRUPTED}
#: The moves a job may make. A move not listed here is a programming error.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.LAUNCHING: frozenset({Phase.TRAINING, Phase.RESTORING, Phase.LAUNCHING} | _LIVE_ENDS),
    Phase.TRAINING: frozenset({Phase.HALTED, Phase.RESTORING, Phase.LAUNCHING, Phase.FINISHING}
                              | _LIVE_ENDS),  # fmt: skip
    Phase.HALTED: frozenset({Phase.TRAINING, Phase.RESTORING} | _LIVE_ENDS),
    Phase.RESTORING: frozenset({Phase.TRAINING, Phase.RESTORING} | _LIVE_ENDS),
    Phase.FINISHING: frozenset({Phase.FINISHED, Phase.TRAINING, Phase.RESTORING, Phase.LAUNCHING}
                               | _LIVE_ENDS),  # fmt: skip
    Phase.FINISHED: frozenset(),
    Phase.FAILED: frozenset(),
    Phase.INTERRUPTED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """An operation moved the job to a phase its current phase does not lead to."""


@dataclass(frozen=True)
class Recovery:
    """What bringing the job back takes (decided by :meth:`JobState.recovery`)."""

    dead: tuple[str, ...]
    restore_ps: bool  # every server back to the latest checkpoint (a PS died, or a restore was cut)
    restart_group: bool  # allreduce: restart every rank from the latest checkpoint
    workers: tuple[NodeSpec, ...]  # PS-mode workers to relaunch
    reason: str


@dataclass
class JobState:
    """One job's changing state. The master owns it; its operations read and move it.

    A job trains a workload (``plan``: its shards; ``shards``: the queues) or the user's
    own script (``script``: its groups, exits, saves and sample ledger; no shards).
    """

    plan: ShardPlan | None
    strategy: Strategy
    sizes: dict[str, int]  # bytes of every model tensor, for placing them on servers
    shards: ShardManager | None = field(init=False)
    script: ScriptState | None = None
    shape: ClusterShape = field(default_factory=ClusterShape)
    phase: Phase = Phase.LAUNCHING
    generation: int = 0
    version: int = 0
    placement: dict[str, str] = field(default_factory=dict)  # tensor -> ps
    nodes: Nodes = field(default_factory=Nodes)
    failures: list[Exit] = field(default_factory=list)  # exits nobody asked for, not yet handled
    to_recover: set[str] = field(default_factory=set)  # failed nodes whose restart counts
    restarts: dict[str, int] = field(default_factory=dict)
    last_exit: dict[str, str] = field(default_factory=dict)  # node -> how it last failed
    speeds: dict[str, float] = field(default_factory=dict)  # worker -> steps/s, last interval

    def __post_init__(self) -> None:
        self.shards = ShardManager(self.plan) if self.plan is not None else None

    # -- phases -----------------------------------------------------------------------
    def move_to(self, phase: Phase) -> None:
        """Raises IllegalTransition for a move :data:`TRANSITIONS` does not allow."""
        if phase not in TRANSITIONS[self.phase]:
            raise IllegalTransition(f"job cannot go from {self.phase} to {phase}")
        self.phase = phase

    @property
    def epoch(self) -> int | None:
        """The epoch training is in (a script's: the latest its ElasticSamplers asked for)."""
        if self.shards is not None:
            return self.shards.epoch
        return self.script.ledger.latest_epoch if self.script is not None else None

    @property
    def leasing(self) -> bool:
        return self.phase == Phase.TRAINING

    @property
    def live(self) -> bool:
        return bool(TRANSITIONS[self.phase])

    # -- the shape ----------------------------------------------------------------------
    def take_shape(self, shape: ClusterShape) -> None:
        """The job runs ``shape`` now (launched, restarted, or a plan carried out)."""
        self.shape = shape

    def resize_in_shape(self, name: str, resources: Resources) -> None:
        """Node ``name`` of the shape has ``resources`` now (relaunched at a plan's size)."""
        self.shape = self.shape.with_resources(name, resources)

    # -- generations, versions, queues -----------------------------------------------------
    def resumed(self, generation: int, version: int, shards: dict | None) -> None:
        """A new master takes over: the next generation after its predecessor's, versions
        after the latest committed, the queues as the latest checkpoint saved them."""
        self.generation = generation + 1
        self.version = version
        self.roll_back(shards)

    def next_generation(self) -> int:
        self.generation += 1
        return self.generation

    def next_version(self) -> int:
        self.version += 1
        return self.version

    def roll_back(self, shards: dict | None) -> None:
        """The shard queues as a checkpoint saved them (``None``: from the start)."""
        if self.plan is not None:
            self.shards = ShardManager(self.plan, shards)

    # -- the parameter servers' cluster --------------------------------------------------------
    def place_on(self, ps_names: list[str]) -> dict[str, str]:
        """Keep the placement if it is on exactly ``ps_names``, else place anew by bytes
        (a restore after an interrupted repartition must not ask a removed server)."""
        if set(self.placement.values()) != set(ps_names):
            self.placement = partition_by_bytes(self.sizes, ps_names)
        return self.placement

    def place(self, placement: dict[str, str]) -> None:
        """Tensors on servers as a repartition moved them."""
        self.placement = placement

    def names_on(self, ps: str) -> tuple[str, ...]:
        return names_on(self.placement, ps)

    def cluster_ready(self) -> bool:
        """Every server of the placement is alive and serves this generation."""
        if self.strategy != Strategy.PS:
            return True
        holders = [self.nodes.get(ps) for ps in set(self.placement.values())]
        return bool(holders) and all(
            n is not None and n.alive and n.generation == self.generation for n in holders
        )

    def cluster_view(self) -> ClusterView | None:
        """The cluster a worker should train against now, or None while there is none."""
        if self.strategy != Strategy.PS or not self.cluster_ready():
            return None
        servers = {ps: self.nodes.get(ps).address for ps in sorted(set(self.placement.values()))}
        return ClusterView(self.generation, servers, dict(self.placement))

    # -- failures ---------------------------------------------------------------------------
    def failed(self, exit_: Exit) -> None:
        """A node ended and nobody had asked it to."""
        self.failures.append(exit_)

    def take_failures(self) -> list[Exit]:
        """The exits nobody asked for since the last call; each is to be reported once."""
        failures, self.failures = self.failures, []
        return failures

    def failure_reported(self, name: str, how: str) -> None:
        """``name`` failed (``how``, in words) and the policy heard of it: its restart counts."""
        self.to_recover.add(name)
        self.last_exit[name] = how

    def record_speed(self, name: str, steps_per_s: float) -> None:
        """A worker's speed over the last interval (the stragglers rule compares them)."""
        self.speeds[name] = steps_per_s

    def dead_in_shape(self) -> list[str]:
        """Nodes of the shape that are not alive and not done (a script's rank that exited 0
        has finished its part)."""
        done = set() if self.script is None else self.script.done
        return sorted(n.name for n in self.shape.nodes
                      if not self.nodes.is_alive(n.name) and n.name not in done)  # fmt: skip

    def count_restart(self, name: str) -> int:
        """``name`` failed and is brought back: one more restart (counted here only, whoever
        relaunches it: the recovery, or a plan that relaunches it bigger). Returns its count."""
        self.to_recover.discard(name)
        self.restarts[name] = self.restarts.get(name, 0) + 1
        return self.restarts[name]

    def recovery(self, max_restarts: int) -> Recovery | None:
        """What recovery must do now, counting restarts; None if nothing is dead or unfinished.

        Raises:
            NodeFailedTooOften: a node failed more than ``max_restarts`` times.
        """
        dead = self.dead_in_shape()
        failed, self.to_recover = self.to_recover & set(dead), set()
        unfinished = self.strategy == Strategy.PS and self.phase == Phase.RESTORING
        if not dead and not unfinished:
            return None
        for name in sorted(failed):
            restarts = self.count_restart(name)
            if self.script is None and restarts > max_restarts:
                raise NodeFailedTooOften(name, restarts, max_restarts,
                                         self.last_exit.get(name, "failed"))  # fmt: skip
        if self.script is not None and failed:  # torchrun's --max-restarts: the group's
            last = sorted(failed)[-1]
            if self.script.failed_restarts + 1 > max_restarts:
                raise NodeFailedTooOften(last, self.script.failed_restarts + 1, max_restarts,
                                         self.last_exit.get(last, "failed"), "the group")  # fmt: skip
        by_name = {n.name: n for n in self.shape.nodes}
        ps_dead = any(by_name[n].role == NodeRole.PS for n in dead)
        allreduce = self.strategy == Strategy.ALLREDUCE
        workers = () if allreduce else tuple(by_name[n] for n in dead
                                             if by_name[n].role == NodeRole.WORKER)  # fmt: skip
        reason = f"{', '.join(dead)} died" if dead else "an interrupted restore"
        return Recovery(tuple(dead), not allreduce and (ps_dead or unfinished), allreduce,
                        workers, reason)  # fmt: skip


class NodeFailedTooOften(Exception):
    """A node (a script's group: ``who``) failed more often than ``runtime.max_restarts``
    allows; ``node`` names the one that failed last (its log says why)."""

    def __init__(self, node: str, failures: int, max_restarts: int, last: str,
                 who: str | None = None) -> None:  # fmt: skip
        subject = node if who is None else who
        last = last if who is None else f"{node} {last}"
        super().__init__(f"{subject} failed {failures} times (runtime.max_restarts is "
                         f"{max_restarts}); last: {last}")  # fmt: skip
        self.node = node
