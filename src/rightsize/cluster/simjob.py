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

from rightsize.cluster.jobmodel import JobModel, Performance, remembered
from rightsize.cluster.traces import TraceJob
from rightsize.core.frozen import filled, remembered_property
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling.api import (
    EventKind,
    MetricSample,
    NodeColumns,
    NodeEvent,
    Observation,
    Plan,
    lazy_metric_samples,
    metric_sample,
    metric_samples,
    window_speed,
)
from rightsize.scaling.book import ObservationBook

# ``filled``'s two steps, bound once: the simulator's innermost loop makes objects this way
_new, _fill = object.__new__, object.__setattr__

def measured(true: float, cv: float, draw: float, cap: float) -> float:
    """A measurement of ``true`` with multiplicative noise ``cv·draw``, never negative nor above
    ``cap``: ``min(true · max(1 + cv·draw, 0), cap)``, spelled out because the builtin calls cost
    more than the arithmetic (the simulator measures millions of values). Same float either way.
    """
    factor = 1.0 + cv * draw
    value = true * (0.0 if 0.0 > factor else factor)
    return cap if cap < value else value


def measured_row(
    true: tuple[float, ...], cv: float, draws: list[float], cap: tuple[float, ...]
) -> list[float]:
    """``[measured(t, cv, d, c) for t, d, c in zip(true, draws, cap)]``: one sample's row,
    :func:`measured`'s arithmetic written inline (the same operations, so the same floats)
    without a call per value."""
    return [
        c if c < (value := t * (0.0 if 0.0 > (factor := 1.0 + cv * d) else factor)) else value
        for t, d, c in zip(true, draws, cap, strict=True)
    ]


class SimJobState(StrEnum):
    """Where a simulated job is in its life (the scheduler's queues). Not the runtime's
    ``runtime.jobstate.JobState``, a real job's record: this one is a phase alone."""

    WAITING = "waiting"
    STARTING = "starting"  # launching or restarting: holds resources, makes no progress
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Noise:
    """Measurement noise of the simulated metric collector (coefficients of variation).

    ``cpu_cv``, if given, is the steady noise of a node's CPU reading alone (speed and
    network keep ``steady_cv``): on real jobs here a 2-s interval's speed counts whole
    steps and varied 2.5-4 times more than the nodes' CPU (right-sizing benchmark's
    oracles: speed CV 0.12 and 0.07, ``e_job`` CV 0.05 and 0.02), and with the speed's
    noise a saturated node (capped at its allocation) read below ``E_thd_job`` in a
    third of the samples, where a real one at its quota reads 1.00.
    """

    steady_cv: float = 0.02
    warmup_cv: float = 0.15
    warmup_s: float = 60.0
    cpu_cv: float | None = None


@dataclass
class SimJob:
    """The mutable state of one job in the simulator."""

    spec: TraceJob
    model: JobModel
    samples_total: float
    rng: np.random.Generator
    state: SimJobState = SimJobState.WAITING
    shape: ClusterShape = field(default_factory=ClusterShape)
    perf: Performance | None = None
    samples_done: float = 0.0
    rate: float = 0.0  # true samples/s now
    last_update_s: float = 0.0
    started_s: float | None = None  # first launch (absolute time)
    finished_s: float | None = None
    ready_s: float = 0.0  # absolute time the current shape starts training
    next_sample_s: float = 0.0
    quiet: bool = False
    version: int = 0  # bumps whenever the completion time changes
    epoch: int = 0  # bumps at every (re)start: a decision tick from an older epoch is void
    link_nodes: int = 0  # nodes it has training on the servers' links (``cluster.links``)
    observed_link_bytes_per_s: float = 0.0  # the link its metrics report (0: the server's)
    timeline: list[tuple[float, float, float]] = field(default_factory=list)  # (t, samples/s, cpu)
    # The sample templates of a run, shared by its jobs (see ``sample_template``).
    templates: dict[tuple[Performance, float], _SampleTemplate] = field(
        default_factory=dict, repr=False
    )
    _template_for: Performance | None = field(default=None, repr=False)
    _template_cache: _SampleTemplate | None = field(default=None, repr=False)
    # The last collection made lazily: once its policy has read one's nodes, it will read
    # every collection's (a policy reads what it reads), so later ones are measured at once.
    _lazy_collection: _CollectedColumns | None = field(default=None, repr=False)
    # What its policy may know (window, events, shape history, plans), kept as the runtime
    # keeps a real job's, on the job's clock.
    book: ObservationBook = field(init=False, repr=False)

    def __post_init__(self) -> None:
        batch = self.model.model.batch_size
        self.book = ObservationBook(
            self.spec.name,
            self.spec.budget,
            int(self.samples_total / batch),
            self.model.cluster.node_limit,
        )

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
        return self.book.decisions

    @property
    def window(self) -> tuple[MetricSample, ...]:
        return self.book.window

    @property
    def plans(self) -> tuple[Plan, ...]:
        return self.book.plans

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
        self.book.applied(plan, self.shape, self.rel(now))
        self.epoch += 1
        self.shape = plan.shape
        self.perf = self.model.evaluate(plan.shape)
        self.observed_link_bytes_per_s = 0.0  # until it trains (``LinkBook.start``)
        self.state = SimJobState.STARTING
        self.ready_s = now + restart_s
        self.set_rate(now, 0.0, 0.0)

    def ready(self, now: float) -> None:
        """The (re)start is over: train at the shape's speed, or report OOM-killed nodes."""
        self.state = SimJobState.RUNNING
        self.next_sample_s = now
        oom = self.perf.oom_nodes
        if oom:
            self.book.noticed(NodeEvent(self.rel(now), node, EventKind.OOM_KILLED) for node in oom)
        speed = 0.0 if oom else self.perf.samples_per_s
        self.set_rate(now, speed, 0.0 if oom else self.perf.cpu_used_cores)

    def rerate(self, now: float, perf: Performance) -> None:
        """Train on at ``perf`` from ``now`` (the same shape at another link share). A rate
        set at this same instant lasted no time: it leaves the timeline (it is no best speed)."""
        if self.timeline and self.timeline[-1][0] == now:
            self.timeline.pop()
        self.perf = perf
        self.set_rate(now, perf.samples_per_s, perf.cpu_used_cores)

    def measured_speed(self) -> float:
        """Mean measured steps/s over the window (the true speed if nothing was measured)."""
        if self.book.window:
            return window_speed(self.book.window)
        return self.perf.steps_per_s if self.perf else 0.0

    def observe(self, now: float, free: Resources) -> Observation:
        """The job as its policy sees it at ``now`` (absolute time), with ``free`` to grow into."""
        steps_done = int(self.samples_done / self.model.model.batch_size)
        return self.book.observe(now - (self.started_s or 0.0), self.shape, free, steps_done)

    # -- metrics -----------------------------------------------------------------------
    def release(self) -> None:
        """Let go of what only the job's policy and result read — its window, events, shape
        history and plans — once it is over and its result is taken (see the simulator)."""
        self.book.close()
        self._lazy_collection = None

    def collect(
        self,
        now: float,
        interval_s: float,
        max_window_s: float,
        noise: Noise,
    ) -> None:
        """Add the metric samples due up to ``now``, keeping at most ``max_window_s`` of them."""
        first = max(self.next_sample_s + interval_s, now - max_window_s + interval_s)
        if now < first:
            return
        times = [first + interval_s * k for k in range(int((now - first) // interval_s) + 1)]
        self.next_sample_s = times[-1]
        keep_after_s = now - max_window_s - (self.started_s or 0.0)  # on the policy's clock
        self.book.record(self._samples(times, noise), keep_after_s)

    def _samples(self, times: list[float], noise: Noise) -> tuple[MetricSample, ...]:
        """Noisy samples at ``times``: one draw of every sample's noise from the job's generator
        (the job's random stream is the same whatever a policy reads), the speed measured now,
        and each sample's nodes measured from the same draws (:meth:`_SampleTemplate.columns`,
        by :func:`measured_row`): now if the policy read the nodes of the job's last lazy
        collection, else when it first reads them (a policy reads what it reads: NEARCHUS
        every collection's nodes, Optimus none; the lazy path costs a call chain per sample)."""
        template = self._template()
        count = len(template.names)
        block = self.rng.standard_normal((len(times), 2 * count + 1))
        batch = self.model.model.batch_size
        start, ready = self.started_s or 0.0, self.ready_s
        warmup_s, warmup_cv, steady_cv = noise.warmup_s, noise.warmup_cv, noise.steady_cv
        last = self._lazy_collection
        if last is not None and last.read:  # its policy reads nodes: measure them all now
            rows = template.columns(block.tolist(), times, ready, noise)
            return tuple(metric_samples([t - start for t in times], batch, rows))
        true, cap = template.true[-1], template.cap[-1]
        speeds = []
        for t, draw in zip(times, block[:, -1].tolist()):  # noqa: B905 (a row each)
            cv = warmup_cv if t - ready < warmup_s else steady_cv
            # measured_row's last value, spelled the same way (the same float)
            speed = true * (0.0 if 0.0 > (factor := 1.0 + cv * draw) else factor)
            speeds.append(cap if cap < speed else speed)
        # only the speeds are measured now; the nodes when a policy first reads them
        collected = self._lazy_collection = _CollectedColumns(template, block, times, ready, noise)
        return tuple(
            lazy_metric_samples([t - start for t in times], speeds, batch, collected.measure))

    def _template(self) -> _SampleTemplate:
        """The current shape's :class:`_SampleTemplate` (see :func:`sample_template`) at the
        link capacity its metrics report."""
        link = self.observed_link_bytes_per_s or self.model.cluster.link_bytes_per_s
        cache = self._template_cache
        if self._template_for is not self.perf or cache.link != link:
            self._template_cache = sample_template(self.templates, self.perf, link)
            self._template_for = self.perf
        return self._template_cache



class _CollectedColumns:
    """The node columns of one collection's samples (``collect``), all measured when a policy
    first reads any of them: a policy that reads nodes reads every sample's (NEARCHUS's
    stability points), and one loop over the collection's rows costs less than a call chain
    per sample; one that reads only the speed (Optimus) never pays for them. It holds no
    sample (each sample holds it): no reference cycle for the simulator's paused collector."""

    __slots__ = ("template", "draws", "times", "ready_s", "noise", "rows")

    def __init__(
        self, template: _SampleTemplate, draws: np.ndarray, times: list[float],
        ready_s: float, noise: Noise,
    ) -> None:  # fmt: skip
        self.template, self.draws, self.times = template, draws, times
        self.ready_s, self.noise = ready_s, noise
        self.rows: list[tuple[NodeColumns, float, float]] | None = None

    @property
    def read(self) -> bool:
        """Whether a policy has read any sample's nodes."""
        return self.rows is not None

    def measure(self, k: int) -> tuple[NodeColumns, float]:
        """Sample ``k``'s node columns and their CPU used in all."""
        rows = self.rows
        if rows is None:
            rows = self.rows = self.template.columns(
                self.draws.tolist(), self.times, self.ready_s, self.noise)
            self.draws = None  # type: ignore[assignment]  # its floats are in the rows now
        nodes, cpu_used_cores, _ = rows[k]
        return nodes, cpu_used_cores


def sample_template(
    templates: dict[tuple[Performance, float], _SampleTemplate],
    perf: Performance,
    link_bytes_per_s: float,
) -> _SampleTemplate:
    """What samples of a job at ``perf`` are made of, with ``link_bytes_per_s`` as each node's
    link capacity, built once per (performance, link) and kept in ``templates``: jobs of one
    model that reach the same shape share its (cached) performance, and so its template. The
    simulator gives its jobs one dict per run, where a performance is found by identity (a cache
    shared by several runs compared their equal performances node by node)."""
    key = (perf, link_bytes_per_s)
    return remembered(templates, key, lambda: _SampleTemplate.of(perf, link_bytes_per_s))


@dataclass(frozen=True)
class _SampleTemplate:
    """What the metrics of one shape's samples are made of, row layout
    ``[cpu used per node..., link bytes/s per node..., steps/s]``.

    Attributes:
        true: the noise-free values of one row (zeros for an OOM-killed job).
        cap: what each value is clipped to after the noise (allocated CPU, the link;
            nothing for the speed).
        link: each node's link capacity, as its metrics report it.
        names, roles, allocated, memory_used, memory_allocated, capacity, steps: the
            node columns that do not vary from sample to sample (see ``NodeColumns``).
    """

    true: tuple[float, ...]
    cap: tuple[float, ...]
    link: float
    names: tuple[str, ...]
    roles: tuple[NodeRole, ...]
    allocated: tuple[float, ...]
    memory_used: tuple[int, ...]
    memory_allocated: tuple[int, ...]
    capacity: tuple[float, ...]
    steps: tuple[float, ...]

    def sample(self, time_s: float, row: list[float], batch: int) -> MetricSample:
        """The sample a row of measurements makes at ``time_s`` (see the row layout; the
        simulated link is full duplex: as many bytes in as out)."""
        speed = row[-1]
        return metric_sample(time_s, self._columns_of(row), speed, speed * batch)

    def columns(
        self, draws: list[list[float]], times: list[float], ready_s: float, noise: Noise
    ) -> list[tuple[NodeColumns, float, float]]:
        """What each row of noise ``draws`` makes (one row per sample, taken at ``times``, see
        the row layout): the node columns, their CPU used in all, and the job's steps/s. Every
        value measured with the noise of its time (the
        warm-up's until ``noise.warmup_s`` after ``ready_s``), and the CPU readings again with
        ``noise.cpu_cv`` after the warm-up if it is given."""
        true, cap, count, fixed = self.true, self.cap, len(self.names), self._fixed
        out = []
        # measured_row and _columns_of written out: one loop for the collection, no call per
        # sample (the simulator's innermost loop; the same operations, so the same floats)
        warmup_s, warmup_cv, steady_cv = noise.warmup_s, noise.warmup_cv, noise.steady_cv
        for values, time_s in zip(draws, times):  # noqa: B905 (equal: a row per sample)
            warm = time_s - ready_s < warmup_s
            cv, cpu_cv = (warmup_cv, None) if warm else (steady_cv, noise.cpu_cv)
            row = [
                c if c < (value := t * (0.0 if 0.0 > (factor := 1.0 + cv * d) else factor))
                else value
                for t, d, c in zip(true, values, cap)  # noqa: B905 (the row layout's length)
            ]  # fmt: skip
            if cpu_cv is not None:  # the CPU readings' own noise
                row[:count] = measured_row(true[:count], cpu_cv, values[:count], cap[:count])
            net, cpu = tuple(row[count:-1]), tuple(row[:count])
            columns = _new(NodeColumns)
            _fill(columns, "__dict__", {
                **fixed, "cpu_used_cores": cpu,
                "net_in_bytes_per_s": net, "net_out_bytes_per_s": net,
            })  # fmt: skip
            out.append((columns, sum(cpu), row[-1]))
        return out

    def _columns_of(self, row: list[float]) -> NodeColumns:
        count = len(self.names)
        net = tuple(row[count:-1])
        return filled(NodeColumns, {
            **self._fixed, "cpu_used_cores": tuple(row[:count]),
            "net_in_bytes_per_s": net, "net_out_bytes_per_s": net,
        })  # fmt: skip

    @remembered_property
    def _fixed(self) -> dict[str, tuple]:
        """The columns that do not vary from sample to sample, by ``NodeColumns`` field."""
        return {
            "names": self.names, "roles": self.roles, "cpu_allocated_cores": self.allocated,
            "memory_used_bytes": self.memory_used, "memory_allocated_bytes": self.memory_allocated,
            "net_capacity_bytes_per_s": self.capacity, "steps_per_s": self.steps,
        }  # fmt: skip

    @classmethod
    def of(cls, perf: Performance, link: float) -> _SampleTemplate:
        oom = bool(perf.oom_nodes)
        nodes = perf.nodes
        true = [0.0 if oom else n.cpu_used_cores for n in nodes]
        true += [0.0 if oom else n.net_bytes_per_s for n in nodes]
        true.append(0.0 if oom else perf.steps_per_s)
        cap = [n.cpu_allocated_cores for n in nodes] + [link] * len(nodes) + [math.inf]
        return cls(
            tuple(map(float, true)),
            tuple(map(float, cap)),
            link,
            tuple(n.name for n in nodes),
            tuple(n.role for n in nodes),
            tuple(n.cpu_allocated_cores for n in nodes),
            tuple(min(n.memory_needed_bytes, n.memory_allocated_bytes or n.memory_needed_bytes)
                  for n in nodes),
            tuple(n.memory_allocated_bytes for n in nodes),
            (link,) * len(nodes),
            tuple(0.0 if oom else n.steps_per_s for n in nodes),
        )  # fmt: skip
