"""Per-node metrics over one interval, from two cumulative readings.

A reading is what the master can see of a node at one moment: CPU seconds its
cgroup has used (cpuacct, or ``/proc`` without cgroups), its memory (the
cgroup's usage less reclaimable page cache), and the node's own counters
(bytes in and out over its sockets, steps, samples, updates applied, loss).
Two readings make a :class:`rightsize.scaling.api.NodeMetrics`: CPU cores used
= delta CPU seconds / delta time (NEARCHUS's u_i), and rates likewise. A node
whose counters went backwards was relaunched in between and is skipped once.

Steps (and a server's updates) are counted over the time they took, not over the
interval: a node that finishes 3 batches a period finishes 2, 3 or 4 in a given
2-s interval, so steps / interval swings by a third between intervals while the
node runs steadily — more than NEARCHUS's 5% stability bound, which then never
holds for slow nodes (measured: the small CNN's samples/s read 32-192 in
successive intervals at a steady 96). Each reading therefore carries when the
node's last counted step ended (``counted_s``, on the master's clock: the node
says how long before its message that was — a worker's steps are confirmed a
step late under overlap, and two at once at a shard's end), and a rate is the
work between two such moments over the time between them (:func:`work_span_s`).
A count can still arrive after the interval it belongs to (a worker confirms its
last batch of a shard with the one before, then none until its next shard's
second batch: 2.6 s at 0.2 CPU on the small CNN); an interval with no count from
a node that is keeping its own pace carries the node's last rate, and the next
count is spread over both intervals by its span (:func:`work_rates`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rightsize.core.shape import NodeRole, NodeSpec
from rightsize.runtime.nodes import Status
from rightsize.runtime.protocol import Stats
from rightsize.runtime.records import NodeReading, ProgressStatus
from rightsize.scaling.api import MetricSample, NodeMetrics

if TYPE_CHECKING:
    from rightsize.runtime.backends.contract import NodeBackend
    from rightsize.runtime.jobstate import JobState


@dataclass(frozen=True)
class Reading:
    """Cumulative counters of one node at ``time_s``."""

    time_s: float
    cpu_s: float
    memory_bytes: int
    bytes_in: float = 0.0
    bytes_out: float = 0.0
    steps: float = 0.0
    samples: float = 0.0
    updates: float = 0.0
    loss_sum: float = 0.0
    loss_n: float = 0.0
    counted_s: float | None = None  # when the last counted step or update ended (None: none yet)

    @classmethod
    def of(cls, time_s: float, cpu_s: float, memory_bytes: int, stats: Stats,
           counted_s: float | None = None) -> Reading:  # fmt: skip
        return cls(time_s, cpu_s, memory_bytes, stats.bytes_in, stats.bytes_out, stats.steps,
                   stats.samples, stats.updates, stats.loss_sum, stats.loss_n, counted_s)  # fmt: skip


#: A node silent this many of its own work units since its last count has stalled
#: (paused for a resize, waiting on a lost peer): its rate is then work / interval,
#: so the stall shows as the slowdown it is.
STALL_UNITS = 3.0


def _stalled(cur: Reading, unit_s: float) -> bool:
    """Silent for more than :data:`STALL_UNITS` work units of ``unit_s`` since its last count."""
    return cur.time_s - cur.counted_s > STALL_UNITS * unit_s


def work_span_s(prev: Reading, cur: Reading, work: float) -> float:
    """The time ``work`` units (steps or updates) between two readings took: from the
    count seen at ``prev`` to the count seen at ``cur`` — the interval itself when either
    moment is unknown, no work was done, or the node has stalled since its last count."""
    interval = cur.time_s - prev.time_s
    if work <= 0 or prev.counted_s is None or cur.counted_s is None:
        return interval
    span = cur.counted_s - prev.counted_s
    if span <= 0 or _stalled(cur, span / work):
        return interval
    return span


@dataclass(frozen=True)
class Rates:
    """A node's pace between two readings."""

    work_per_s: float  # steps (a parameter server: updates applied) per second
    samples_per_s: float


def work_rates(role: NodeRole, prev: Reading, cur: Reading, last: Rates | None = None) -> Rates:
    """The node's steps (or updates) and samples per second between two readings.

    ``last`` is its previous interval's pace: carried when nothing was counted now but the
    node's last counted step ended within :data:`STALL_UNITS` of that pace (its count is
    on its way, see the module's doc); a node silent for longer reads 0.
    """
    work = max(0.0, cur.updates - prev.updates if role == NodeRole.PS else cur.steps - prev.steps)
    if work == 0 and last is not None and last.work_per_s > 0 and cur.counted_s is not None:
        if not _stalled(cur, 1 / last.work_per_s):
            return last
    span = work_span_s(prev, cur, work)
    return Rates(work / span, max(0.0, cur.samples - prev.samples) / span)


def node_metrics(
    node: NodeSpec,
    prev: Reading,
    cur: Reading,
    capacity_bytes_per_s: float | None = None,
    rates: Rates | None = None,
) -> NodeMetrics:
    """The node's averages between two readings (``cur.time_s > prev.time_s``); its
    ``rates`` if already known (else measured without a previous pace)."""
    dt = cur.time_s - prev.time_s
    rates = rates or work_rates(node.role, prev, cur)
    return NodeMetrics(
        name=node.name,
        role=node.role,
        cpu_used_cores=max(0.0, cur.cpu_s - prev.cpu_s) / dt,
        cpu_allocated_cores=node.resources.cpu_cores,
        memory_used_bytes=cur.memory_bytes,
        memory_allocated_bytes=node.resources.memory_bytes,
        net_in_bytes_per_s=max(0.0, cur.bytes_in - prev.bytes_in) / dt,
        net_out_bytes_per_s=max(0.0, cur.bytes_out - prev.bytes_out) / dt,
        net_capacity_bytes_per_s=capacity_bytes_per_s if node.role == NodeRole.PS else None,
        steps_per_s=rates.work_per_s,
    )


def _restarted(prev: Reading, cur: Reading) -> bool:
    return any(
        getattr(cur, k) < getattr(prev, k) for k in ("steps", "updates", "bytes_in", "bytes_out")
    )


class MetricCollector:
    """Turns successive readings of every node into one :class:`MetricSample` per interval."""

    def __init__(self, ps_capacity_bytes_per_s: float | None = None) -> None:
        self.last: dict[str, Reading] = {}
        self.pace: dict[str, Rates] = {}
        self.capacity = ps_capacity_bytes_per_s
        self.loss: float | None = None

    def collect(
        self, time_s: float, readings: list[tuple[NodeSpec, Reading]]
    ) -> MetricSample | None:
        """A sample over the nodes read both now and last time; None if there are none.

        Job-wide ``steps_per_s`` is batches per second summed over workers (DLRover's
        R, eq. 1); ``samples_per_s`` likewise. ``self.loss`` is the interval's mean
        training loss, if any batch finished.
        """
        metrics, samples_per_s, loss_sum, loss_n = [], 0.0, 0.0, 0.0
        for node, cur in readings:
            prev = self.last.get(node.name)
            self.last[node.name] = cur
            if prev is None or cur.time_s <= prev.time_s or _restarted(prev, cur):
                self.pace.pop(node.name, None)
                continue
            rates = self.pace[node.name] = work_rates(
                node.role, prev, cur, self.pace.get(node.name)
            )
            metrics.append(node_metrics(node, prev, cur, self.capacity, rates))
            if node.role == NodeRole.WORKER:
                samples_per_s += rates.samples_per_s
                loss_sum += cur.loss_sum - prev.loss_sum
                loss_n += cur.loss_n - prev.loss_n
        self.loss = loss_sum / loss_n if loss_n else None
        if not metrics:
            return None
        steps = sum(m.steps_per_s for m in metrics if m.role == NodeRole.WORKER)
        return MetricSample(time_s, tuple(metrics), steps, samples_per_s)

    def forget(self, name: str) -> None:
        self.last.pop(name, None)
        self.pace.pop(name, None)


def read_nodes(
    job: JobState, backend: NodeBackend, time_s: float, origin_s: float = 0.0
) -> list[tuple[NodeSpec, Reading]]:
    """A reading of every running node of the job's shape (cgroup counters and its own);
    ``time_s`` is on the job's clock, which starts at ``origin_s`` on the master's."""
    readings = []
    for spec in job.shape.nodes:
        node = job.nodes.get(spec.name)
        if node is None or node.status != Status.RUNNING:
            continue
        try:
            cpu_s, memory = backend.reading(spec.name)
        except (OSError, KeyError):  # it just ended; its exit is handled next
            continue
        counted = None if node.counted_s is None else node.counted_s - origin_s
        readings.append((spec, Reading.of(time_s, cpu_s, memory, node.stats, counted)))
    return readings


def progress(sample: MetricSample, job: JobState, steps_done: int, steps_total: int | None,
             loss: float | None) -> ProgressStatus:  # fmt: skip
    """One metric interval as a record (``epoch`` is None for a script that does not use an
    ElasticSampler; ``steps_total`` None where the length is not known)."""
    return ProgressStatus(
        round(sample.time_s, 3), job.epoch, steps_done, steps_total, sample.steps_per_s,
        sample.samples_per_s, loss, sample.e_job, job.shape.describe(),
        tuple(NodeReading(m.name, str(m.role), m.cpu_used_cores, m.cpu_allocated_cores,
                          m.memory_used_bytes, m.memory_allocated_bytes, m.net_in_bytes_per_s,
                          m.net_out_bytes_per_s, m.steps_per_s)
              for m in sample.nodes),
    )  # fmt: skip


def progress_status(sample: MetricSample, job: JobState, steps_done: int, steps_total: int | None,
                    loss: float | None) -> dict[str, Any]:  # fmt: skip
    """One line of the progress display and one entry of the report's throughput series, as
    the state file and the progress callback take it (:func:`progress`'s JSON)."""
    return progress(sample, job, steps_done, steps_total, loss).to_json()
