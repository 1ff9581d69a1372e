"""Per-node metrics over one interval, from two cumulative readings.

A reading is what the master can see of a node at one moment: CPU seconds its
cgroup has used (cpuacct, or ``/proc`` without cgroups), its memory (the
cgroup's usage less reclaimable page cache), and the node's own counters
(bytes in and out over its sockets, steps, samples, updates applied, loss).
Two readings make a :class:`rightsize.scaling.api.NodeMetrics`: CPU cores used
= delta CPU seconds / delta time (NEARCHUS's u_i), and rates likewise. A node
whose counters went backwards was relaunched in between and is skipped once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rightsize.core.shape import NodeRole, NodeSpec
from rightsize.runtime.nodes import Status
from rightsize.runtime.protocol import Stats
from rightsize.scaling.api import MetricSample, NodeMetrics

if TYPE_CHECKING:
    from rightsize.runtime.backends.local import LocalBackend
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

    @classmethod
    def of(cls, time_s: float, cpu_s: float, memory_bytes: int, stats: Stats) -> Reading:
        return cls(time_s, cpu_s, memory_bytes, stats.bytes_in, stats.bytes_out, stats.steps,
                   stats.samples, stats.updates, stats.loss_sum, stats.loss_n)  # fmt: skip


def node_metrics(
    node: NodeSpec, prev: Reading, cur: Reading, capacity_bytes_per_s: float | None = None
) -> NodeMetrics:
    """The node's averages between two readings (``cur.time_s > prev.time_s``)."""
    dt = cur.time_s - prev.time_s
    work = cur.updates - prev.updates if node.role == NodeRole.PS else cur.steps - prev.steps
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
        steps_per_s=max(0.0, work) / dt,
    )


def _restarted(prev: Reading, cur: Reading) -> bool:
    return any(
        getattr(cur, k) < getattr(prev, k) for k in ("steps", "updates", "bytes_in", "bytes_out")
    )


class MetricCollector:
    """Turns successive readings of every node into one :class:`MetricSample` per interval."""

    def __init__(self, ps_capacity_bytes_per_s: float | None = None) -> None:
        self.last: dict[str, Reading] = {}
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
                continue
            metrics.append(node_metrics(node, prev, cur, self.capacity))
            if node.role == NodeRole.WORKER:
                samples_per_s += (cur.samples - prev.samples) / (cur.time_s - prev.time_s)
                loss_sum += cur.loss_sum - prev.loss_sum
                loss_n += cur.loss_n - prev.loss_n
        self.loss = loss_sum / loss_n if loss_n else None
        if not metrics:
            return None
        steps = sum(m.steps_per_s for m in metrics if m.role == NodeRole.WORKER)
        return MetricSample(time_s, tuple(metrics), steps, samples_per_s)

    def forget(self, name: str) -> None:
        self.last.pop(name, None)


def read_nodes(job: JobState, backend: LocalBackend, time_s: float) -> list[tuple[NodeSpec, Reading]]:
    """A reading of every running node of the job's shape (cgroup counters and its own)."""
    readings = []
    for spec in job.shape.nodes:
        node = job.nodes.get(spec.name)
        if node is None or node.status != Status.RUNNING:
            continue
        try:
            cpu_s, memory = backend.reading(spec.name)
        except (OSError, KeyError):  # it just ended; its exit is handled next
            continue
        readings.append((spec, Reading.of(time_s, cpu_s, memory, node.stats)))
    return readings


def progress_status(sample: MetricSample, job: JobState, steps_total: int,
                    loss: float | None) -> dict[str, Any]:  # fmt: skip
    """One line of the progress display and one entry of the report's throughput series."""
    return {
        "time_s": round(sample.time_s, 3),
        "epoch": job.shards.epoch,
        "steps_done": job.shards.batches_done,
        "steps_total": steps_total,
        "steps_per_s": sample.steps_per_s,
        "samples_per_s": sample.samples_per_s,
        "loss": loss,
        "e_job": sample.e_job,
        "shape": job.shape.describe(),
        "nodes": [
            {"name": m.name, "role": str(m.role), "cpu_used": m.cpu_used_cores,
             "cpu_allocated": m.cpu_allocated_cores, "memory_used": m.memory_used_bytes,
             "memory_allocated": m.memory_allocated_bytes, "net_in": m.net_in_bytes_per_s,
             "net_out": m.net_out_bytes_per_s, "steps_per_s": m.steps_per_s}
            for m in sample.nodes
        ],
    }  # fmt: skip
