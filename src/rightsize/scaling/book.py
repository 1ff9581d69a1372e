"""The observation book: what a policy may know about one job, kept the same way by every mechanism.

A policy sees a job only through a frozen :class:`~rightsize.scaling.api.Observation`.
Two mechanisms run jobs — the runtime's control loop (real processes) and the cluster
simulator (a performance model) — and both must remember the same things for it: the
window of metric samples since the last applied plan, the node events since then, one
(shape, speed) record per shape the job has left, the plans applied so far, and when
the current shape was requested. :class:`ObservationBook` is that memory and its
transitions, written once, so that a policy decides alike in simulation and on a real
job (``tests/test_policy_conformance.py`` feeds both mechanisms the same samples and
compares every observation and decision). What differs between them is only what they
pass in: their clock, the cluster's free capacity and the job's progress.

Times are on the policy's clock (seconds since the job started).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rightsize.core.frozen import filled
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import (
    MetricSample,
    NodeEvent,
    Observation,
    Plan,
    Readings,
    ShapeRecord,
    WorkerRange,
    window_speed,
)


@dataclass
class ObservationBook:
    """One job's memory for its policy, and the :class:`Observation` built from it.

    Attributes:
        job: the job's name.
        budget: the job's resource budget ``R_max``.
        steps_total: steps the job will run in all, if known.
        node_limit: the largest single node the mechanism can place.
        prior: speeds known before the job started (``LaunchRequest.prior``).
        plans: plans applied so far, the launch plan first; the last made the current shape.
        shape_since_s: when the current shape was requested.
        worker_range: the workers a plan may have.
        window: metric samples since the last applied plan, oldest first.
        events: node events since the last applied plan.
        history: one record per shape the job has left, with the speed it measured there,
            oldest first (the shape running now is not in it: a policy measures that one
            from the window, over the part it trusts).
    """

    job: str
    budget: Resources
    steps_total: int | None = None
    node_limit: Resources | None = None
    prior: tuple[ShapeRecord, ...] = ()
    plans: tuple[Plan, ...] = ()
    shape_since_s: float = 0.0
    worker_range: WorkerRange = WorkerRange()
    # Tuples, replaced rather than mutated: an observation takes them as they are.
    window: tuple[MetricSample, ...] = ()
    events: tuple[NodeEvent, ...] = ()
    history: tuple[ShapeRecord, ...] = ()
    #: What policies read from ``window``, computed once per window: a new one whenever the
    #: window changes (``record``, ``applied``, ``close``), so no policy remembers windows.
    readings: Readings = field(default_factory=Readings, repr=False, compare=False)
    #: What policies read from the job's prior and budget, computed once for its life.
    job_readings: Readings = field(default_factory=Readings, repr=False, compare=False)

    @property
    def decisions(self) -> int:
        """Plans applied after the launch plan (each one changed the running job)."""
        return max(0, len(self.plans) - 1)

    def record(self, samples: tuple[MetricSample, ...], keep_after_s: float | None = None) -> None:
        """Add ``samples`` (oldest first) to the window; with ``keep_after_s``, drop every
        sample taken at or before it (a mechanism that bounds how far back it keeps)."""
        window = self.window + samples
        if keep_after_s is not None and window and window[0].time_s <= keep_after_s:
            # (usually nothing has left the window: the test above is all it costs)
            drop = next((i for i, s in enumerate(window) if s.time_s > keep_after_s), len(window))
            window = window[drop:]
        if len(window) != len(self.window) or samples:
            self.window, self.readings = window, Readings()

    def noticed(self, events: Iterable[NodeEvent]) -> None:
        """Node events happened (a node was OOM-killed or failed)."""
        self.events += tuple(events)

    def applied(self, plan: Plan, before: ClusterShape, time_s: float) -> None:
        """``plan`` replaced the shape ``before`` at ``time_s`` (or launched the job, with an
        empty window): remember the speed ``before`` measured, if it measured any, and
        start a new window with no events."""
        if self.window:
            self.history += (ShapeRecord(before, window_speed(self.window)),)
        self.window, self.readings = (), Readings()
        self.events = ()
        self.plans += (plan,)
        self.shape_since_s = time_s

    def close(self) -> None:
        """The job is over: let go of what only its policy read (a long simulated trace keeps
        every finished job, and their windows were most of what the garbage collector walked)."""
        self.window = self.events = self.history = self.plans = ()
        self.readings, self.job_readings = Readings(), Readings()

    def observe(
        self, time_s: float, shape: ClusterShape, free: Resources, steps_done: int
    ) -> Observation:
        """The job as its policy sees it at ``time_s``, running ``shape`` with ``steps_done``
        steps behind it, when the cluster can still give it ``free``.

        Built with :func:`~rightsize.core.frozen.filled` (every field given, of its
        type, the window's and the job's readings too): the simulator builds one or two per
        decision tick.
        """
        plans = self.plans
        return filled(
            Observation,
            {
                "job": self.job,
                "time_s": time_s,
                "shape": shape,
                "budget": self.budget,
                "free": free,
                "window": self.window,
                "events": self.events,
                "history": self.history,
                "decisions": len(plans) - 1 if plans else 0,  # (``decisions``, inline)
                "steps_done": steps_done,
                "steps_total": self.steps_total,
                "plans": plans,
                "prior": self.prior,
                "node_limit": self.node_limit,
                "shape_since_s": self.shape_since_s,
                "worker_range": self.worker_range,
                "readings": self.readings,
                "job_readings": self.job_readings,
            },
        )
