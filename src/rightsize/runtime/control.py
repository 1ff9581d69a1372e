"""The master's control loop: sample, observe, ask the policy, apply; checkpoint; recover.

This is the seam between mechanism and policy (DESIGN.md): the
:class:`Controller` keeps what a policy may know — the window of samples since
the last applied decision, node events, the shape→speed history — and builds
the frozen :class:`Observation`; the :class:`ControlLoop` owns time (a clock
passed in) and calls a :class:`Mechanism` to do things. Neither decides a
shape: the policy does. Both are tested with a fake clock, a scripted policy
and a fake mechanism; the real mechanism is :class:`runtime.master.Master`.

Each metric interval yields one sample and one ``decide`` call. A node killed
by the OOM killer triggers an extra decision at once (DLRover §4.2 relaunches
it with more memory; whether to is the policy's call), after which anything
still dead is relaunched as it was (a worker) or restored from the latest
checkpoint (a parameter server).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.runtime.clock import Clock
from rightsize.scaling.api import (
    EventKind,
    MetricSample,
    NodeEvent,
    Observation,
    Plan,
    Policy,
    ShapeRecord,
)


@dataclass(frozen=True)
class Transition:
    """What applying a plan did: whether it was applied, how long it took, and its parts."""

    applied: bool
    transition_s: float = 0.0
    details: dict[str, float | str] = field(default_factory=dict)


class Mechanism(Protocol):
    """What the control loop needs from whatever runs the job."""

    @property
    def shape(self) -> ClusterShape: ...

    def pump(self, timeout_s: float) -> None:
        """Serve nodes for up to ``timeout_s`` seconds."""

    def sample(self) -> MetricSample | None:
        """Read every node and return the interval's metrics (None if nothing to report)."""

    def checkpoint(self) -> None: ...

    def failures(self) -> list[NodeEvent]:
        """Node deaths noticed since the last call."""

    def recover(self) -> None:
        """Bring back every node of the shape that is dead."""

    def apply(self, plan: Plan) -> Transition: ...

    def finished(self) -> bool: ...

    def steps_done(self) -> int: ...


class Controller:
    """Builds observations for ``policy`` and keeps its memory between decisions."""

    def __init__(
        self,
        job: str,
        policy: Policy,
        budget: Resources,
        free: Callable[[ClusterShape], Resources],
        steps_total: int | None,
        node_limit: Resources | None = None,
        plans: list[Plan] | None = None,
        shape_since_s: float = 0.0,
    ) -> None:
        self.job, self.policy, self.budget = job, policy, budget
        self.free, self.steps_total, self.node_limit = free, steps_total, node_limit
        self.window: list[MetricSample] = []
        self.events: list[NodeEvent] = []
        self.history: list[ShapeRecord] = []
        self.plans: list[Plan] = list(plans or [])
        self.decisions = max(0, len(self.plans) - 1)  # the launch plan is not a decision
        self.shape_since_s = shape_since_s

    def observation(self, time_s: float, shape: ClusterShape, steps_done: int) -> Observation:
        history = list(self.history)
        if self.window:  # the shape running now, at its speed so far
            history.append(ShapeRecord(shape, _mean_speed(self.window)))
        return Observation(
            job=self.job,
            time_s=time_s,
            shape=shape,
            budget=self.budget,
            free=self.free(shape),
            window=tuple(self.window),
            events=tuple(self.events),
            history=tuple(history),
            decisions=self.decisions,
            steps_done=steps_done,
            steps_total=self.steps_total,
            plans=tuple(self.plans),
            node_limit=self.node_limit,
            shape_since_s=self.shape_since_s,
        )

    def decide(self, time_s: float, shape: ClusterShape, steps_done: int) -> Plan | None:
        return self.policy.decide(self.observation(time_s, shape, steps_done))

    def applied(self, plan: Plan, before: ClusterShape, time_s: float) -> None:
        """``plan`` changed the shape: remember the old shape's speed, start a new window."""
        if self.window:
            self.history.append(ShapeRecord(before, _mean_speed(self.window)))
        self.window.clear()
        self.events.clear()
        self.plans.append(plan)
        self.decisions += 1
        self.shape_since_s = time_s


def _mean_speed(window: list[MetricSample]) -> float:
    return statistics.fmean(s.steps_per_s for s in window)


class Schedule:
    """When the next metric sample and the next checkpoint are due."""

    def __init__(self, now: float, metric_interval_s: float, checkpoint_interval_s: float) -> None:
        self.metric_interval_s = metric_interval_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.next_metric = now + metric_interval_s
        self.next_checkpoint = now + checkpoint_interval_s

    def timeout(self, now: float) -> float:
        return max(0.0, min(self.next_metric, self.next_checkpoint) - now)

    def metrics_due(self, now: float) -> bool:
        if now < self.next_metric:
            return False
        self.next_metric = max(self.next_metric + self.metric_interval_s, now)
        return True

    def checkpoint_due(self, now: float) -> bool:
        if now < self.next_checkpoint:
            return False
        self.next_checkpoint = now + self.checkpoint_interval_s
        return True


#: Longest the loop serves nodes before it looks for failures again (seconds).
FAILURE_CHECK_S = 0.5


class ControlLoop:
    """Runs a job to completion: the mechanism does, the policy decides, the clock paces."""

    def __init__(
        self,
        controller: Controller,
        mechanism: Mechanism,
        clock: Clock,
        schedule: Schedule,
        started_at: float,
        on_sample: Callable[[MetricSample], None] | None = None,
    ) -> None:
        self.controller, self.mechanism, self.clock = controller, mechanism, clock
        self.schedule, self.started_at = schedule, started_at
        self.on_sample = on_sample or (lambda _sample: None)

    def run(self) -> None:
        while not self.mechanism.finished():
            wait = min(self.schedule.timeout(self.clock.now()), FAILURE_CHECK_S)
            self.mechanism.pump(wait)
            self.step()

    def step(self) -> None:
        """One turn: handle failures, then whatever timers are due."""
        events = self.mechanism.failures()
        if events:
            self.controller.events.extend(events)
            if any(e.kind == EventKind.OOM_KILLED for e in events):
                self.decide()
            self.mechanism.recover()
        now = self.clock.now()
        if self.schedule.metrics_due(now):
            sample = self.mechanism.sample()
            if sample is not None:
                self.controller.window.append(sample)
                self.on_sample(sample)
                self.decide()
        if self.schedule.checkpoint_due(self.clock.now()):
            self.mechanism.checkpoint()

    def decide(self) -> None:
        shape = self.mechanism.shape
        time_s = self.clock.now() - self.started_at
        plan = self.controller.decide(time_s, shape, self.mechanism.steps_done())
        if plan is not None and self.mechanism.apply(plan).applied:
            self.controller.applied(plan, shape, time_s)
