"""ClusterShape: the parameter-server and worker nodes of one job and their resources.

This is NEARCHUS's *DT-config* (§IV): ``(n_ps, n_wk, r_ps, r_wk)`` — how many
parameter servers and workers a job runs and the resources given to each role —
refined so that every node carries its own allocation, because NEARCHUS's
resource optimizer rebalances CPU between individual nodes. A shape is an
immutable value; every operation returns a new shape, so a policy can propose
one without touching the running job.

Node names (``ps-0``, ``worker-2``) are stable: removing ``worker-1`` does not
rename ``worker-2``, and a new node takes the lowest free index of its role.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rightsize.core.errors import ResourceError, SpecError, unknown_name
from rightsize.core.frozen import remembered_property
from rightsize.core.resources import CPU_DECIMALS, Resources, sum_resources

#: Every node's CPU is rounded to a millicore (``core.resources``).
MILLICORE = 10**-CPU_DECIMALS


def rounding_slack(nodes: int) -> float:
    """The CPU a shape of ``nodes`` nodes may sum above an amount it splits exactly.

    Each node's CPU is rounded to a millicore, so ``nodes`` nodes may exceed the amount
    they share by up to one millicore each. Every mechanism that compares a shape's total
    with a budget or with what is free tolerates exactly this much (``scaling.plan_check``,
    the service's lease books, the simulator's scheduler), and policies leave this much
    room when they grow (``scaling.shapes.rounding_room``): one rule, so that a plan one of
    them accepts is not refused by another for the rounding alone.
    """
    return nodes * MILLICORE


class NodeRole(StrEnum):
    """What a node does in a job: serve parameters, or compute gradients."""

    PS = "ps"
    WORKER = "worker"


@dataclass(frozen=True)
class NodeSpec:
    """One node of a job: its stable name, role and allocated resources."""

    name: str
    role: NodeRole
    resources: Resources

    def __init__(self, name: str, role: NodeRole, resources: Resources) -> None:
        # By hand, as ``Resources.__init__`` (the generated one sets each field through
        # ``object.__setattr__``): every derived shape builds a new node per node.
        fields = self.__dict__
        fields["name"], fields["role"], fields["resources"] = name, role, resources

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": str(self.role), **self.resources.to_dict()}


@dataclass(frozen=True)
class DTConfig:
    """NEARCHUS's DT-config: node counts and the total resources of each role."""

    n_ps: int
    n_wk: int
    r_ps: Resources
    r_wk: Resources


@dataclass(frozen=True)
class ClusterShape:
    """The nodes of one job. Use the ``with_*`` methods to derive new shapes."""

    nodes: tuple[NodeSpec, ...] = ()

    def __post_init__(self) -> None:
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            raise SpecError(f"node names must be unique, got {names}")

    # Derived values, computed once per shape: a shape never changes, and the simulator and
    # the policies ask for the same totals of it many times per decision. They are
    # stored in the instance ``__dict__``, outside the dataclass fields, so equality,
    # hashing, ``replace`` and ``to_dict`` do not see them. (``remembered_property``: 3.11's
    # ``cached_property`` takes a lock on every first read, and the simulator makes a shape
    # per plan.)
    def __hash__(self) -> int:
        # The hash dataclass would compute, ``hash((self.nodes,))``, but remembered: shapes are
        # dict keys (performance caches) looked up on every simulated restart.
        return self._hash

    @remembered_property
    def _hash(self) -> int:
        return hash((self.nodes,))

    @remembered_property
    def _by_role(self) -> dict[NodeRole, tuple[NodeSpec, ...]]:
        nodes = self.nodes  # two explicit passes: iterating the enum costs more than the work
        return {
            NodeRole.PS: tuple(n for n in nodes if n.role == NodeRole.PS),
            NodeRole.WORKER: tuple(n for n in nodes if n.role == NodeRole.WORKER),
        }

    @remembered_property
    def names(self) -> tuple[str, ...]:
        """Each node's name, in node order (the order of every sample's node columns)."""
        return tuple([node.name for node in self.nodes])

    @remembered_property
    def _total(self) -> Resources:
        return sum_resources([node.resources for node in self.nodes])

    @remembered_property
    def node_extremes(self) -> tuple[float, int, float, int]:
        """(largest node CPU, largest node memory, smallest node CPU, smallest node memory):
        what a plan check compares with a node limit and with zero, once per shape."""
        cpus = [n.resources.cpu_cores for n in self.nodes] or [0.0]
        memories = [n.resources.memory_bytes for n in self.nodes] or [0]
        return max(cpus), max(memories), min(cpus), min(memories)

    @remembered_property
    def _role_totals(self) -> dict[NodeRole, Resources]:
        return {
            role: sum_resources([node.resources for node in members])
            for role, members in self._by_role.items()
        }

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_counts(
        cls, n_ps: int, n_workers: int, ps: Resources, worker: Resources
    ) -> ClusterShape:
        """``n_ps`` PS nodes with ``ps`` each and ``n_workers`` workers with ``worker`` each."""
        if n_ps < 0 or n_workers < 0:
            raise SpecError(f"node counts cannot be negative: ps={n_ps}, workers={n_workers}")
        nodes = [NodeSpec(f"ps-{i}", NodeRole.PS, ps) for i in range(n_ps)]
        nodes += [NodeSpec(f"worker-{i}", NodeRole.WORKER, worker) for i in range(n_workers)]
        return cls(tuple(nodes))

    @classmethod
    def from_dt_config(cls, config: DTConfig) -> ClusterShape:
        """Split each role's total evenly over its nodes (NEARCHUS's initial assignment)."""
        ps = config.r_ps.scaled(1 / config.n_ps) if config.n_ps else Resources()
        wk = config.r_wk.scaled(1 / config.n_wk) if config.n_wk else Resources()
        return cls.from_counts(config.n_ps, config.n_wk, ps, wk)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterShape:
        """Inverse of :meth:`to_dict`."""
        nodes = []
        for item in data.get("nodes", []):
            role = NodeRole(item["role"])
            nodes.append(NodeSpec(item["name"], role, Resources.from_dict(item)))
        return cls(tuple(nodes))

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [node.to_dict() for node in self.nodes]}

    # -- queries ----------------------------------------------------------------------
    def role(self, role: NodeRole) -> tuple[NodeSpec, ...]:
        return self._by_role.get(role, ())

    @property
    def ps(self) -> tuple[NodeSpec, ...]:
        return self.role(NodeRole.PS)

    @property
    def workers(self) -> tuple[NodeSpec, ...]:
        return self.role(NodeRole.WORKER)

    @property
    def n_ps(self) -> int:
        return len(self._by_role[NodeRole.PS])

    @property
    def n_workers(self) -> int:
        return len(self._by_role[NodeRole.WORKER])

    def has_node(self, name: str) -> bool:
        return any(node.name == name for node in self.nodes)

    def node(self, name: str) -> NodeSpec:
        for node in self.nodes:
            if node.name == name:
                return node
        raise unknown_name("node", name, (n.name for n in self.nodes))

    def total(self) -> Resources:
        return self._total

    def role_total(self, role: NodeRole) -> Resources:
        totals = self._role_totals
        return totals[role] if role in totals else Resources()

    def dt_config(self) -> DTConfig:
        return DTConfig(
            self.n_ps,
            self.n_workers,
            self.role_total(NodeRole.PS),
            self.role_total(NodeRole.WORKER),
        )

    # -- derived shapes ---------------------------------------------------------------
    def with_node_added(self, role: NodeRole, resources: Resources) -> ClusterShape:
        """A new node of ``role`` under the lowest free ``<role>-<i>`` name."""
        taken = {node.name for node in self.nodes}
        index = next(i for i in range(len(taken) + 1) if f"{role}-{i}" not in taken)
        return ClusterShape(self.nodes + (NodeSpec(f"{role}-{index}", role, resources),))

    def without_node(self, name: str) -> ClusterShape:
        self.node(name)  # raises on an unknown name
        return ClusterShape(tuple(node for node in self.nodes if node.name != name))

    def with_resources(self, name: str, resources: Resources) -> ClusterShape:
        self.node(name)
        return ClusterShape(
            tuple(NodeSpec(n.name, n.role, resources) if n.name == name else n for n in self.nodes)
        )

    def redistributed(self, role: NodeRole, total: Resources | None = None) -> ClusterShape:
        """Give every node of ``role`` an equal share of ``total`` (default: the role's total).

        This is NEARCHUS's "evenly redistributing the resource assignment among
        the same type of nodes", ``r_wk / n_wk``.
        """
        members = self.role(role)
        if not members:
            return self
        share = (total or self.role_total(role)).scaled(1 / len(members))
        return ClusterShape(
            tuple(NodeSpec(n.name, n.role, share) if n.role == role else n for n in self.nodes)
        )

    def scaled_up(self, extra: Resources) -> ClusterShape:
        """Add ``extra`` to the job, split over nodes in proportion to what each holds.

        This is NEARCHUS's scale-up: "resources added ... are proportionally added
        to each training node based on the previous resource assignments". A
        dimension nobody holds yet is split evenly.
        """
        total = self.total()
        if not self.nodes:
            raise ResourceError("cannot scale up a shape with no nodes")
        count = len(self.nodes)

        def grown(res: Resources) -> Resources:
            # ``res + Resources(extra.cpu_cores * cpu_w, int(extra.memory_bytes * mem_w))``
            # with the share's millicore rounding written out: the same numbers, one object.
            cpu_w = res.cpu_cores / total.cpu_cores if total.cpu_cores else 1 / count
            mem_w = res.memory_bytes / total.memory_bytes if total.memory_bytes else 1 / count
            return Resources(
                res.cpu_cores + round(extra.cpu_cores * cpu_w, CPU_DECIMALS),
                res.memory_bytes + int(extra.memory_bytes * mem_w),
                res.gpus,
            )

        return ClusterShape(tuple(NodeSpec(n.name, n.role, grown(n.resources)) for n in self.nodes))

    # -- display ----------------------------------------------------------------------
    def describe(self) -> str:
        """Compact text, e.g. ``1 ps (2 cpu) + 2 workers (4 cpu)``."""
        return self._description

    @remembered_property
    def _description(self) -> str:  # plans and reports describe the same shapes many times
        parts = []
        for role in NodeRole:
            members = self.role(role)
            if members:
                cpu = self.role_total(role).cpu_cores
                plural = "s" if len(members) > 1 and role == NodeRole.WORKER else ""
                parts.append(f"{len(members)} {role}{plural} ({cpu:g} cpu)")
        return " + ".join(parts) or "empty"
