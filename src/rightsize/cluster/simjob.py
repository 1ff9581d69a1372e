"""One simulated job: its progress, its shape's true speed, and the metrics a collector would see.

The job's true speed under a shape comes from :class:`~rightsize.cluster.jobmodel.JobModel`;
progress (samples processed) advances at that speed while the job runs and
not at all while it (re)starts. Metrics are what NEARCHUS's Metric Collector
or DLRover's Pod Watcher would read every ``metric_interval_s``: each node's
CPU, memory and link use and the job's speed, with multiplicative Gaussian
noise — larger for ``warmup_s`` after every (re)start, the "cold starts" that
NEARCHUS's Stability Detector waits out (§IV). Noise never changes progress.
Samples are generated lazily, when the policy is asked, from the job's own
seeded generator, so results depend only on the seed and not on event order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from rightsize.cluster.jobmodel import JobModel, Performance
from rightsize.cluster.traces import TraceJob
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import (
    EventKind,
    MetricSample,
    NodeEvent,
    NodeMetrics,
    Plan,
    ShapeRecord,
)


def node_metrics(base: dict, cpu_used_cores: float, net_bytes_per_s: float) -> NodeMetrics:
    """A :class:`NodeMetrics` from a node's fixed fields and one sample's measurements.

    The simulator builds millions of these, so it fills the fields directly
    instead of through the frozen dataclass's ``__init__`` (five times slower);
    the result is equal to the normally built object (tested).
    """
    metrics = object.__new__(NodeMetrics)
    fields = {
        **base,
        "cpu_used_cores": cpu_used_cores,
        "net_in_bytes_per_s": net_bytes_per_s,
        "net_out_bytes_per_s": net_bytes_per_s,
    }
    object.__setattr__(metrics, "__dict__", fields)
    return metrics


def metric_sample(
    time_s: float, nodes: tuple[NodeMetrics, ...], steps_per_s: float, samples_per_s: float
) -> MetricSample:
    """A :class:`MetricSample` built like :func:`node_metrics`, for the same reason (tested)."""
    sample = object.__new__(MetricSample)
    fields = {
        "time_s": time_s,
        "nodes": nodes,
        "steps_per_s": steps_per_s,
        "samples_per_s": samples_per_s,
    }
    object.__setattr__(sample, "__dict__", fields)
    return sample


class JobState(StrEnum):
    WAITING = "waiting"
    STARTING = "starting"  # launching or restarting: holds resources, makes no progress
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Noise:
    """Measurement noise of the simulated metric collector (coefficients of variation)."""

    steady_cv: float = 0.02
    warmup_cv: float = 0.15
    warmup_s: float = 60.0


@dataclass
class SimJob:
    """The mutable state of one job in the simulator."""

    spec: TraceJob
    model: JobModel
    samples_total: float
    rng: np.random.Generator
    state: JobState = JobState.WAITING
    shape: ClusterShape = field(default_factory=ClusterShape)
    perf: Performance | None = None
    samples_done: float = 0.0
    rate: float = 0.0  # true samples/s now
    last_update_s: float = 0.0
    started_s: float | None = None  # first launch (absolute time)
    finished_s: float | None = None
    ready_s: float = 0.0  # absolute time the current shape starts training
    shape_since_s: float = 0.0  # absolute time the current shape was requested
    next_sample_s: float = 0.0
    window: list[MetricSample] = field(default_factory=list)
    events: list[NodeEvent] = field(default_factory=list)
    history: list[ShapeRecord] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    prior: tuple[ShapeRecord, ...] = ()
    quiet: bool = False
    version: int = 0  # bumps whenever the completion time changes
    timeline: list[tuple[float, float, float]] = field(default_factory=list)  # (t, samples/s, cpu)
    _template_for: Performance | None = field(default=None, repr=False)
    _template_cache: _SampleTemplate | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def arrival_s(self) -> float:
        return self.spec.arrival_s

    @property
    def budget(self) -> Resources:
        return self.spec.budget

    @property
    def work_core_s(self) -> float:
        return self.samples_total * self.model.model.compute_core_s_per_sample

    @property
    def restarts(self) -> int:
        """Plans applied after launch (every one restarts the job's containers)."""
        return max(0, len(self.plans) - 1)

    def rel(self, t: float) -> float:
        """Absolute time -> seconds since the job started (the policy's clock)."""
        return t - (self.started_s or 0.0)

    # -- progress ----------------------------------------------------------------------
    def advance(self, now: float) -> None:
        self.samples_done = min(
            self.samples_total, self.samples_done + self.rate * (now - self.last_update_s)
        )
        self.last_update_s = now

    def set_rate(self, now: float, rate: float, cpu_used: float) -> None:
        self.advance(now)
        self.rate = rate
        self.version += 1
        self.timeline.append((now, rate, cpu_used))

    def completion_s(self) -> float | None:
        """When the job will finish at the current rate (``None`` if it is not progressing)."""
        if self.rate <= 0:
            return None
        return self.last_update_s + (self.samples_total - self.samples_done) / self.rate

    # -- shape changes -----------------------------------------------------------------
    def restart(self, now: float, plan: Plan, restart_s: float) -> None:
        """Stop training, take ``plan``'s shape, and train again after ``restart_s``."""
        if self.perf is not None and self.state == JobState.RUNNING:
            self.history.append(ShapeRecord(self.shape, self.measured_speed()))
        self.plans.append(plan)
        self.shape = plan.shape
        self.perf = self.model.evaluate(plan.shape)
        self.state = JobState.STARTING
        self.shape_since_s = now
        self.ready_s = now + restart_s
        self.window.clear()
        self.events.clear()
        self.set_rate(now, 0.0, 0.0)

    def ready(self, now: float) -> None:
        """The (re)start is over: train at the shape's speed, or report OOM-killed nodes."""
        self.state = JobState.RUNNING
        self.next_sample_s = now
        oom = self.perf.oom_nodes
        for node in oom:
            self.events.append(NodeEvent(self.rel(now), node, EventKind.OOM_KILLED))
        speed = 0.0 if oom else self.perf.samples_per_s
        self.set_rate(now, speed, 0.0 if oom else self.perf.cpu_used_cores)

    def measured_speed(self) -> float:
        """Mean measured steps/s over the window (the true speed if nothing was measured)."""
        if self.window:
            return sum(s.steps_per_s for s in self.window) / len(self.window)
        return self.perf.steps_per_s if self.perf else 0.0

    # -- metrics -----------------------------------------------------------------------
    def collect(
        self, now: float, interval_s: float, max_window_s: float, noise: Noise, nodes: bool = True
    ) -> None:
        """Add the metric samples due up to ``now``, keeping at most ``max_window_s`` of them
        (without per-node metrics unless ``nodes``: see ``Policy.reads_node_metrics``)."""
        first = max(self.next_sample_s + interval_s, now - max_window_s + interval_s)
        count = int((now - first) // interval_s) + 1 if now >= first else 0
        if count <= 0:
            return
        times = first + interval_s * np.arange(count)
        self.next_sample_s = float(times[-1])
        self.window.extend(self._samples(times, noise, nodes))
        cutoff = self.rel(now - max_window_s)
        drop = next((i for i, s in enumerate(self.window) if s.time_s > cutoff), len(self.window))
        del self.window[:drop]

    def _samples(self, times: np.ndarray, noise: Noise, nodes: bool) -> list[MetricSample]:
        """Noisy samples at ``times``: one draw from the job's generator, the arithmetic done on
        the whole (samples x values) block at once — element-wise float64 numpy gives the same
        numbers as Python floats — and only the frozen metric objects built per sample."""
        template = self._template()
        count = len(template.bases)
        draws = self.rng.standard_normal((len(times), 2 * count + 1))
        cv = np.where(times - self.ready_s < noise.warmup_s, noise.warmup_cv, noise.steady_cv)
        z = np.maximum(1.0 + cv[:, None] * draws, 0.0)
        rows = np.minimum(template.true * z, template.cap).tolist()
        batch = self.model.model.batch_size
        start = self.started_s or 0.0
        out = []
        for t, row in zip(times.tolist(), rows, strict=True):
            # Without ``nodes`` the per-node noise is still drawn (above), so the job's random
            # stream, and every later sample, is the same whether or not nodes are built.
            metrics = (
                tuple(map(node_metrics, template.bases, row[:count], row[count:-1]))
                if nodes
                else ()
            )
            out.append(metric_sample(t - start, metrics, row[-1], row[-1] * batch))
        return out

    def _template(self) -> _SampleTemplate:
        """The current shape's :class:`_SampleTemplate`, built once per performance."""
        if self._template_for is not self.perf:
            self._template_cache = _SampleTemplate.of(
                self.perf, self.model.cluster.link_bytes_per_s
            )
            self._template_for = self.perf
        return self._template_cache


@dataclass(frozen=True)
class _SampleTemplate:
    """What the metrics of one shape's samples are made of, row layout
    ``[cpu used per node..., link bytes/s per node..., steps/s]``.

    Attributes:
        bases: each node's metric fields that do not vary from sample to sample.
        true: the noise-free values of one row (zeros for an OOM-killed job).
        cap: what each value is clipped to after the noise (allocated CPU, the link;
            nothing for the speed).
    """

    bases: tuple[dict, ...]
    true: np.ndarray
    cap: np.ndarray

    @classmethod
    def of(cls, perf: Performance, link: float) -> _SampleTemplate:
        oom = bool(perf.oom_nodes)
        nodes = perf.nodes
        bases = tuple(
            {
                "name": n.name,
                "role": n.role,
                "cpu_allocated_cores": n.cpu_allocated_cores,
                "memory_used_bytes": min(
                    n.memory_needed_bytes, n.memory_allocated_bytes or n.memory_needed_bytes
                ),
                "memory_allocated_bytes": n.memory_allocated_bytes,
                "net_capacity_bytes_per_s": link,
                "steps_per_s": 0.0 if oom else n.steps_per_s,
            }
            for n in nodes
        )
        true = [0.0 if oom else n.cpu_used_cores for n in nodes]
        true += [0.0 if oom else n.net_bytes_per_s for n in nodes]
        true.append(0.0 if oom else perf.steps_per_s)
        cap = [n.cpu_allocated_cores for n in nodes] + [link] * len(nodes) + [math.inf]
        return cls(bases, np.array(true), np.array(cap))
