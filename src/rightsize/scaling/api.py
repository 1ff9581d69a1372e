"""The contract between autoscaling policies and the mechanisms that carry out their decisions.

A :class:`Policy` is pure: ``decide(observation) -> Plan | None``. It gets a
frozen :class:`Observation` of one job — its current shape, its budget, what
the cluster has free, and the metrics since its last decision — and answers
with a frozen :class:`Plan` (a target shape and the reason) or ``None`` to keep
the shape. It never sleeps, reads a clock, touches processes or imports
``runtime``, ``cluster`` or ``service``; everything it needs to remember
(samples since the last decision, the (n_ps, n_wk) -> speed history Optimus
fits) is handed to it in the observation. The same policy object therefore
drives a real job (``runtime``'s master builds observations from measured
metrics) and a simulated one (``cluster``'s simulator builds them from a
performance model), and its tests are tables of observations and expected
plans.

Mechanisms own time and state: they collect samples, keep the history, apply
plans, and record every change with its reason.
"""

from __future__ import annotations

import math
import statistics
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from rightsize.core.frozen import filled, remembered_property
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.core.spec import Strategy

T = TypeVar("T")


@dataclass(frozen=True)
class NodeMetrics:
    """One node's measurements over one metric interval.

    Attributes:
        name: the node's name in the shape (``ps-0``, ``worker-2``).
        role: parameter server or worker.
        cpu_used_cores: average CPU cores used over the interval (u_i).
        cpu_allocated_cores: CPU cores allocated (a_i).
        memory_used_bytes: resident memory at the end of the interval.
        memory_allocated_bytes: the node's memory limit.
        net_in_bytes_per_s: received bytes per second.
        net_out_bytes_per_s: sent bytes per second.
        net_capacity_bytes_per_s: the node's link capacity, if known.
        steps_per_s: training steps per second this node took (workers) or
            served (parameter servers: updates applied per second).
    """

    name: str
    role: NodeRole
    cpu_used_cores: float
    cpu_allocated_cores: float
    memory_used_bytes: int = 0
    memory_allocated_bytes: int = 0
    net_in_bytes_per_s: float = 0.0
    net_out_bytes_per_s: float = 0.0
    net_capacity_bytes_per_s: float | None = None
    steps_per_s: float = 0.0

    @property
    def cpu_efficiency(self) -> float:
        """``e_i = u_i / a_i`` (NEARCHUS §IV); 0 for a node with nothing allocated."""
        return self.cpu_used_cores / self.cpu_allocated_cores if self.cpu_allocated_cores else 0.0

    @property
    def net_utilization(self) -> float | None:
        """Busier direction of the link over its capacity, if the capacity is known."""
        if not self.net_capacity_bytes_per_s:
            return None
        busiest = max(self.net_in_bytes_per_s, self.net_out_bytes_per_s)
        return busiest / self.net_capacity_bytes_per_s


@dataclass(frozen=True)
class NodeColumns(Sequence[NodeMetrics]):
    """One sample's per-node metrics, as columns in node order: the one form in which both
    mechanisms hand a policy its nodes' metrics (:attr:`MetricSample.nodes`).

    A policy sums columns over a window (NEARCHUS reads every node's CPU in every sample at
    every decision); one that wants a node at a time reads it as a sequence of
    :class:`NodeMetrics`, each made when read. The runtime measures :class:`NodeMetrics` and
    the constructor of :class:`MetricSample` turns them into columns (:meth:`of`); the
    simulator builds the columns straight from its model (:func:`node_columns`): either
    way, one function makes them.

    Attributes:
        names: each node's name.
        roles: each node's role.
        cpu_used_cores: each node's ``u_i``.
        cpu_allocated_cores: each node's ``a_i``.
        memory_used_bytes, memory_allocated_bytes, net_in_bytes_per_s, net_out_bytes_per_s,
        net_capacity_bytes_per_s, steps_per_s: each node's :class:`NodeMetrics` field.
        net_utilization: each node's :attr:`NodeMetrics.net_utilization` (``None`` if its link
            capacity is unknown): derived from the link columns when first read.
    """

    names: tuple[str, ...]
    roles: tuple[NodeRole, ...]
    cpu_used_cores: tuple[float, ...]
    cpu_allocated_cores: tuple[float, ...]
    memory_used_bytes: tuple[int, ...]
    memory_allocated_bytes: tuple[int, ...]
    net_in_bytes_per_s: tuple[float, ...]
    net_out_bytes_per_s: tuple[float, ...]
    net_capacity_bytes_per_s: tuple[float | None, ...]
    steps_per_s: tuple[float, ...]

    @remembered_property
    def net_utilization(self) -> tuple[float | None, ...]:
        # derived on the first read: NEARCHUS reads it only to place a PSN bottleneck, and
        # the simulator makes a set of columns per sample, millions in a long trace
        return _net_utilization(
            self.net_in_bytes_per_s, self.net_out_bytes_per_s, self.net_capacity_bytes_per_s)

    @classmethod
    def of(cls, nodes: Sequence[NodeMetrics]) -> NodeColumns:
        """The columns of ``nodes`` (the runtime's measured :class:`NodeMetrics`)."""
        if isinstance(nodes, NodeColumns):
            return nodes
        return node_columns(
            tuple(n.name for n in nodes),
            tuple(n.role for n in nodes),
            tuple(n.cpu_used_cores for n in nodes),
            tuple(n.cpu_allocated_cores for n in nodes),
            tuple(n.memory_used_bytes for n in nodes),
            tuple(n.memory_allocated_bytes for n in nodes),
            tuple(n.net_in_bytes_per_s for n in nodes),
            tuple(n.net_out_bytes_per_s for n in nodes),
            tuple(n.net_capacity_bytes_per_s for n in nodes),
            tuple(n.steps_per_s for n in nodes),
        )

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> NodeMetrics:  # type: ignore[override]
        """The ``index``-th node's metrics, made now."""
        if isinstance(index, slice):
            raise TypeError("NodeColumns are indexed one node at a time")
        return NodeMetrics(
            self.names[index], self.roles[index], self.cpu_used_cores[index],
            self.cpu_allocated_cores[index], self.memory_used_bytes[index],
            self.memory_allocated_bytes[index], self.net_in_bytes_per_s[index],
            self.net_out_bytes_per_s[index], self.net_capacity_bytes_per_s[index],
            self.steps_per_s[index],
        )  # fmt: skip

    def __iter__(self) -> Iterator[NodeMetrics]:
        return (self[i] for i in range(len(self.names)))

    def net_utilization_of(self, name: str) -> float | None:
        """The first node named ``name``'s link utilization (``None`` if unknown or absent):
        :attr:`net_utilization`'s value for that node, without making every node's (a policy
        asks for one node's, once per sample of a window)."""
        try:
            index = self.names.index(name)
        except ValueError:
            return None
        capacity = self.net_capacity_bytes_per_s[index]
        if not capacity:
            return None
        net_in, net_out = self.net_in_bytes_per_s[index], self.net_out_bytes_per_s[index]
        return (net_in if net_in > net_out else net_out) / capacity


def _net_utilization(
    net_in: tuple[float, ...], net_out: tuple[float, ...], capacity: tuple[float | None, ...]
) -> tuple[float | None, ...]:
    """Each node's busier link direction over its capacity (``NodeMetrics.net_utilization``)."""
    if net_in is net_out:  # one column for both directions (a full-duplex model's): no max
        return tuple([b / c if c else None for b, c in zip(net_in, capacity, strict=True)])
    return tuple([
        (i if i > o else o) / c if c else None
        for i, o, c in zip(net_in, net_out, capacity, strict=True)
    ])  # fmt: skip


def node_columns(
    names: tuple[str, ...],
    roles: tuple[NodeRole, ...],
    cpu_used_cores: tuple[float, ...],
    cpu_allocated_cores: tuple[float, ...],
    memory_used_bytes: tuple[int, ...],
    memory_allocated_bytes: tuple[int, ...],
    net_in_bytes_per_s: tuple[float, ...],
    net_out_bytes_per_s: tuple[float, ...],
    net_capacity_bytes_per_s: tuple[float | None, ...],
    steps_per_s: tuple[float, ...],
) -> NodeColumns:
    """A :class:`NodeColumns`, made as its constructor would, without it: the simulator makes
    one per metric sample, millions in a long trace."""
    return filled(NodeColumns, {
        "names": names, "roles": roles, "cpu_used_cores": cpu_used_cores,
        "cpu_allocated_cores": cpu_allocated_cores, "memory_used_bytes": memory_used_bytes,
        "memory_allocated_bytes": memory_allocated_bytes,
        "net_in_bytes_per_s": net_in_bytes_per_s, "net_out_bytes_per_s": net_out_bytes_per_s,
        "net_capacity_bytes_per_s": net_capacity_bytes_per_s, "steps_per_s": steps_per_s,
    })  # fmt: skip


@dataclass(frozen=True)
class MetricSample:
    """Every node's metrics for one interval ending at ``time_s``, and the job's speed.

    ``nodes`` may be given as :class:`NodeMetrics` (the runtime measures them so); the sample
    keeps them as :class:`NodeColumns`, the one form both mechanisms hand a policy.
    ``cpu_used_cores`` (``Σu_i`` in node order) is derived when the sample is made.
    """

    time_s: float
    nodes: NodeColumns
    steps_per_s: float  # job-wide training steps per second
    samples_per_s: float = 0.0
    if TYPE_CHECKING:  # derived, not a field (see __post_init__ and metric_sample)
        cpu_used_cores: float

    def __post_init__(self) -> None:
        columns = NodeColumns.of(self.nodes)
        object.__setattr__(self, "nodes", columns)
        object.__setattr__(self, "cpu_used_cores", sum(columns.cpu_used_cores))

    def node(self, name: str) -> NodeMetrics | None:
        return next((n for n in self.nodes if n.name == name), None)

    def role(self, role: NodeRole) -> tuple[NodeMetrics, ...]:
        return tuple(n for n in self.nodes if n.role == role)

    @property
    def cpu_allocated_cores(self) -> float:
        return sum(self.nodes.cpu_allocated_cores)

    @property
    def e_job(self) -> float:
        """NEARCHUS's job resource efficiency ``sum(u_i) / sum(a_i)``."""
        allocated = self.cpu_allocated_cores
        return self.cpu_used_cores / allocated if allocated else 0.0


class _NodesOnFirstRead:
    """``MetricSample.nodes`` and ``cpu_used_cores`` of a sample made by
    :func:`lazy_metric_samples`: made on the first read by the ``measure`` function it was
    made with, then kept in the instance's ``__dict__``, which later reads find first (a
    non-data descriptor). A sample made by its constructor has both in its ``__dict__``
    already and never gets here. Set on the class after it is made, so the dataclass does
    not take it for the fields' default; a ``__getattr__`` did the same after a failed
    lookup, which cost the simulator more than the columns themselves."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        values = instance.__dict__
        values["nodes"], values["cpu_used_cores"] = values.pop("_measure")(values.pop("_index"))
        return values[self.name]


for _name in ("nodes", "cpu_used_cores"):
    _lazy = _NodesOnFirstRead()
    _lazy.__set_name__(MetricSample, _name)
    setattr(MetricSample, _name, _lazy)


def metric_sample(
    time_s: float, nodes: NodeColumns, steps_per_s: float, samples_per_s: float
) -> MetricSample:
    """A :class:`MetricSample` of ``nodes``, made as its constructor would (``cpu_used_cores``
    derived), without it: the simulator's samples."""
    return filled(MetricSample, {
        "time_s": time_s, "nodes": nodes, "steps_per_s": steps_per_s,
        "samples_per_s": samples_per_s, "cpu_used_cores": sum(nodes.cpu_used_cores),
    })  # fmt: skip


def metric_samples(
    times_s: Iterable[float], batch: int, measured: Iterable[tuple[NodeColumns, float, float]]
) -> list[MetricSample]:
    """:func:`metric_sample` of each time and (nodes, their ``sum(cpu_used_cores)``, steps/s),
    ``samples_per_s`` being the speed times ``batch``: one call for a collection's samples
    (the simulator's innermost loop)."""
    new, set_dict, out = object.__new__, object.__setattr__, []
    for time_s, (columns, cpu_used_cores, speed) in zip(times_s, measured):  # noqa: B905
        sample = new(MetricSample)  # ``filled`` without its call: one per sample
        set_dict(sample, "__dict__", {
            "time_s": time_s, "nodes": columns, "steps_per_s": speed,
            "samples_per_s": speed * batch, "cpu_used_cores": cpu_used_cores,
        })  # fmt: skip
        out.append(sample)
    return out


def lazy_metric_samples(
    times_s: Iterable[float], steps_per_s: Iterable[float], batch: int,
    measure: Callable[[int], tuple[NodeColumns, float]],
) -> list[MetricSample]:
    """:func:`metric_sample` of each time and speed (``samples_per_s`` is the speed times
    ``batch``), whose nodes are made when first read: ``measure(k)`` gives the ``k``-th
    sample's nodes and their ``sum(cpu_used_cores)``. The simulator's samples: a policy that
    reads only the job's speed (Optimus) then never pays for every node's noisy metrics in
    every sample, the simulator's innermost loop. Once read, each sample equals, field by
    field, the one :func:`metric_sample` makes of the same nodes."""
    new, set_dict, out = object.__new__, object.__setattr__, []
    for index, (time_s, speed) in enumerate(zip(times_s, steps_per_s)):  # noqa: B905
        sample = new(MetricSample)  # ``filled`` without its call: one per sample
        set_dict(sample, "__dict__", {
            "time_s": time_s, "steps_per_s": speed, "samples_per_s": speed * batch,
            "_measure": measure, "_index": index,
        })  # fmt: skip
        out.append(sample)
    return out


class EventKind(StrEnum):
    """Things that happened to nodes, which a policy may react to (DLRover §4.2)."""

    OOM_KILLED = "oom_killed"
    FAILED = "failed"


@dataclass(frozen=True)
class NodeEvent:
    time_s: float
    node: str
    kind: EventKind
    detail: str = ""


@dataclass(frozen=True)
class ShapeRecord:
    """A shape the job ran with, and the speed it reached there (for model-fitting policies)."""

    shape: ClusterShape
    steps_per_s: float


@dataclass(frozen=True)
class WorkerRange:
    """The number of workers (ranks) a policy may choose: ``low`` to ``high`` (None: as many
    as the budget allows); ``rightsize torchrun --min-nproc/--max-nproc``."""

    low: int = 1
    high: int | None = None

    def allows(self, n: int) -> bool:
        return n >= self.low and (self.high is None or n <= self.high)

    def clip(self, n: int) -> int:
        n = max(self.low, n)
        return n if self.high is None else min(self.high, n)


@dataclass(frozen=True)
class Observation:
    """Everything a policy may know about one job at one decision point.

    Attributes:
        job: the job's name.
        time_s: now, on the mechanism's clock (seconds since the job started).
        shape: the current shape.
        budget: the job's resource budget ``R_max``.
        free: resources the cluster can still give this job now, beyond its shape.
        window: metric samples since the last applied decision (oldest first),
            taken every metric interval; a shape change empties it.
        events: node events since the last applied decision.
        history: one record per shape the job has run with so far, oldest first.
        decisions: how many plans have been applied to this job (restarts).
        steps_done: training steps completed so far.
        steps_total: steps the job will run in all, if known.
    """

    job: str
    time_s: float
    shape: ClusterShape
    budget: Resources
    free: Resources
    window: tuple[MetricSample, ...] = ()
    events: tuple[NodeEvent, ...] = ()
    history: tuple[ShapeRecord, ...] = ()
    decisions: int = 0
    steps_done: int = 0
    steps_total: int | None = None
    # Added for the schedule policies (issue 5); all optional.
    plans: tuple[Plan, ...] = ()  # plans applied so far, oldest first; the last made `shape`
    prior: tuple[ShapeRecord, ...] = ()  # speeds known before the job started (see LaunchRequest)
    node_limit: Resources | None = None  # the largest single node the mechanism can place
    shape_since_s: float = 0.0  # when the current shape was requested (plan applied or launch)
    worker_range: WorkerRange = WorkerRange()  # the workers a plan may have
    # Derived, not fields (so not in equality, repr or ``dataclasses.fields``): what policies
    # read from the window, and what they read from what stays the job's for its life — its
    # prior, its budget (see ``Readings``). The observation book supplies both, one
    # ``Readings`` per window and one per job; an observation built directly, or by
    # ``dataclasses.replace``, makes its own.
    if TYPE_CHECKING:
        readings: Readings
        job_readings: Readings

    def __post_init__(self) -> None:
        object.__setattr__(self, "readings", Readings())
        object.__setattr__(self, "job_readings", Readings())

    @remembered_property
    def headroom(self) -> Resources:
        """What the job may still grow by: the smaller of budget left and cluster free
        (computed on the first read and kept with this observation: NEARCHUS's rules read it
        several times per decision)."""
        return headroom(self.shape, self.budget, self.free)

    @property
    def last_plan(self) -> Plan | None:
        """The plan that produced the current shape (its ``details`` carry a policy's notes)."""
        return self.plans[-1] if self.plans else None

    def mean_speed(self, last: int | None = None) -> float:
        """Mean job steps/s over the window (or its last ``last`` samples); 0 if empty."""
        samples = self.window[-last:] if last else self.window
        return window_speed(samples) if samples else 0.0


class Action(StrEnum):
    """The kind of change a plan makes (for reports and for the mechanism's fast paths)."""

    LAUNCH = "launch"
    SCALE_UP = "scale_up"
    ADD_PS = "add_ps"
    ADD_WORKER = "add_worker"
    REMOVE_WORKER = "remove_worker"
    REBALANCE = "rebalance"
    REPLACE_PS = "replace_ps"
    RELAUNCH_OOM = "relaunch_oom"
    RESHAPE = "reshape"


@dataclass(frozen=True)
class Plan:
    """A policy's decision: run the job with ``shape`` from now on, because ``reason``."""

    shape: ClusterShape
    action: Action
    reason: str
    details: dict[str, float | str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON-ready values (the service hands a job's launch to its runner so)."""
        return {"shape": self.shape.to_dict(), "action": str(self.action),
                "reason": self.reason, "details": dict(self.details)}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        """The inverse of ``to_json``; an unknown action is a ``ValueError``."""
        return cls(ClusterShape.from_dict(data["shape"]), Action(data["action"]),
                   str(data["reason"]), dict(data.get("details", {})))  # fmt: skip


class Policy(ABC):
    """An autoscaling policy. Subclasses validate their parameters in ``__init__``."""

    name: str = "policy"
    #: the training strategies whose jobs it sizes (the simulator models parameter servers)
    strategies: frozenset[Strategy] = frozenset(Strategy)

    @abstractmethod
    def initial_shape(self, budget: Resources, free: Resources) -> ClusterShape | None:
        """The shape to launch with under ``budget`` when ``free`` is available, or
        ``None`` if the job cannot start yet (the scheduler keeps it waiting)."""

    @abstractmethod
    def decide(self, observation: Observation) -> Plan | None:
        """A new shape for the job, or ``None`` to keep the current one."""

    def decision_due_s(self, observation: Observation) -> float:
        """The earliest time, on the observation's clock, at which this policy could answer
        anything but ``None`` given what it has seen — e.g. once a stability window can be
        full. Mechanisms may skip asking before then; ``math.inf`` means "not unless the job
        or the cluster changes". By default: now."""
        return observation.time_s

    def prior_shapes(
        self, budget: Resources, node_limit: Resources | None = None
    ) -> tuple[ClusterShape, ...]:
        """Shapes whose speed this policy wants measured before the job starts (Optimus's
        profiling runs, FA-BF's exhaustive search). The mechanism measures them and hands
        the results back as ``LaunchRequest.prior`` and ``Observation.prior``. None by default."""
        return ()

    def launch_plan(self, request: LaunchRequest) -> Plan | None:
        """The plan to start a job with, or ``None`` to keep it waiting.

        Mechanisms call this rather than :meth:`initial_shape` so that a policy can use
        what is known before launch (``request.prior``) and leave notes for itself in the
        plan's ``details``; by default it wraps :meth:`initial_shape`.
        """
        shape = self.initial_shape(request.budget, request.free)
        if shape is None:
            return None
        return Plan(shape, Action.LAUNCH, f"{self.name}: launch with {shape.describe()}")


@dataclass(frozen=True)
class LaunchRequest:
    """What a policy may know when a job is about to start.

    Attributes:
        job: the job's name.
        budget: the job's resource budget ``R_max``.
        free: what the cluster can give the job now.
        prior: speeds measured before launch — the shapes the policy asked for in
            :meth:`Policy.prior_shapes`, and the final shapes of similar finished jobs
            (DLRover §4.3's initial plan from history).
        node_limit: the largest single node the mechanism can place.
    """

    job: str
    budget: Resources
    free: Resources
    prior: tuple[ShapeRecord, ...] = ()
    node_limit: Resources | None = None


def headroom(shape: ClusterShape, budget: Resources, free: Resources) -> Resources:
    """What a job running ``shape`` may still grow by: the smaller of the budget left and what
    the cluster has free (:attr:`Observation.headroom`)."""
    # ``Resources(budget left).clipped_to(free)`` in one object: rounding the smaller of the
    # CPU left and the free CPU (already rounded) equals the smaller of the two rounded.
    total = shape.total()
    return Resources(
        min(max(0.0, budget.cpu_cores - total.cpu_cores), free.cpu_cores),
        min(max(0, budget.memory_bytes - total.memory_bytes), free.memory_bytes),
        min(max(0, budget.gpus - total.gpus), free.gpus),
    )


class Readings:
    """What policies read from one window of samples — NEARCHUS's stability verdict,
    nearchus+'s evident imbalance — each computed once for the window.

    The observation book keeps one per window and starts a new one whenever the window
    changes, handing it to every observation of that window: a mechanism asks a policy twice
    about one window (``decision_due_s``, then ``decide``), and the verdict is computed once
    without the policy remembering windows itself. It keeps another for the job's life
    (``Observation.job_readings``), for what is read from the job's prior and budget alone
    (Optimus's grouped prior speeds, read again at every decision). ``key`` names the computation by value
    (what is read and the parameters it is read with), so policies sharing the window never
    share a value by accident. A window belongs to one shape (a plan starts a new one).
    """

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[Hashable, Any] = {}

    def of(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The value ``compute()`` gives for this window, computed on the first ask."""
        values = self._values
        if key in values:
            return values[key]
        value = values[key] = compute()
        return value


def window_speed(samples: Sequence[MetricSample]) -> float:
    """The job's mean steps/s over ``samples`` (not empty): the one window speed every
    mechanism and policy uses — the runtime's and the simulator's shape history, the
    observation's :meth:`Observation.mean_speed`, NEARCHUS's stability points.

    ``math.fsum``, so the result is the exactly rounded mean whatever the order of the
    samples and the Python version (a builtin ``sum`` is compensated only from 3.12); it is
    what ``statistics.fmean`` computes, without its generic-iterable overhead. One sample
    (each of NEARCHUS's stability points, usually) is its speed ``+ 0.0``: the same float
    as the fsum (which turns a -0.0 into 0.0, as the addition does), for a tenth of the cost.
    """
    if len(samples) == 1:
        return samples[0].steps_per_s + 0.0
    return math.fsum([s.steps_per_s for s in samples]) / len(samples)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Population std / mean (0 for an empty or all-zero sequence)."""
    if not values:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else 0.0
