"""The master's control loop: sample, observe, ask the policy, apply; checkpoint; recover.

This is the seam between mechanism and policy (DESIGN.md): the
:class:`Controller` keeps what a policy may know — the window of samples since
the last applied decision, node events, the shape→speed history — in the
observation book the simulator keeps too (``scaling/book.py``), and builds the
frozen :class:`Observation` from it; the :class:`ControlLoop` owns time (a clock
passed in) and calls a :class:`Mechanism` to do things. Neither decides a
shape: the policy does. Both are tested with a fake clock, a scripted policy
and a fake mechanism; the real mechanism is :class:`runtime.master.Master`.

Each metric interval yields one sample and one ``decide`` call. A node killed
by the OOM killer triggers an extra decision at once (DLRover §4.2 relaunches
it with more memory; whether to is the policy's call), after which anything
still dead is relaunched as it was (a worker) or restored from the latest
checkpoint (a parameter server). A plan that would restart the job's ranks (a
script's change of world size) must pay back its measured cost first
(:mod:`scaling.payback`), a safety net under every policy like the OOM rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
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
    WorkerRange,
)
from rightsize.scaling.book import ObservationBook
from rightsize.scaling.oom import memory_doubled_after_oom
from rightsize.scaling.payback import PaybackRule, RestartCost, payback


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

    def restart_cost(self, plan: Plan) -> RestartCost | None:
        """What ``plan`` costs in restarts (None: it restarts nothing, or nothing is known)."""

    def decline(self, plan: Plan, why: str) -> None:
        """Record a plan the payback rule turned down."""

    def finished(self) -> bool: ...

    def steps_done(self) -> int: ...


class Controller:
    """Asks ``policy`` about one real job, from the job's :class:`ObservationBook` — the same
    book the simulator keeps for a simulated job, so a policy decides alike in both."""

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
        prior: tuple[ShapeRecord, ...] = (),
        worker_range: WorkerRange = WorkerRange(),
    ) -> None:
        self.policy, self.free = policy, free
        self.book = ObservationBook(
            job, budget, steps_total, node_limit, prior, tuple(plans or ()), shape_since_s,
            worker_range,
        )

    @property
    def budget(self) -> Resources:
        """The job's budget ``R_max``."""
        return self.book.budget

    def record(self, sample: MetricSample) -> None:
        """One metric interval's sample joins the window."""
        self.book.record((sample,))

    def noticed(self, events: list[NodeEvent]) -> None:
        self.book.noticed(events)

    def observation(self, time_s: float, shape: ClusterShape, steps_done: int) -> Observation:
        return self.book.observe(time_s, shape, self.free(shape), steps_done)

    def decide(self, time_s: float, shape: ClusterShape, steps_done: int) -> Plan | None:
        return self.consult(time_s, shape, steps_done)[0]

    def consult(self, time_s: float, shape: ClusterShape,
                steps_done: int) -> tuple[Plan | None, Observation]:  # fmt: skip
        """The policy's plan, and the observation it decided on."""
        observation = self.observation(time_s, shape, steps_done)
        return self.policy.decide(observation), observation

    def applied(self, plan: Plan, before: ClusterShape, time_s: float) -> None:
        """``plan`` changed the shape: remember the old shape's speed, start a new window."""
        self.book.applied(plan, before, time_s)


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
        payback_rule: PaybackRule = PaybackRule(),
    ) -> None:
        self.controller, self.mechanism, self.clock = controller, mechanism, clock
        self.payback_rule = payback_rule
        self.schedule, self.started_at = schedule, started_at
        self.on_sample = on_sample or (lambda _sample: None)
        # OOM kills whose remedy is not applied yet (node -> its memory when killed): a plan
        # abandoned because another node died meanwhile is tried again with both kills
        self.oom_killed: dict[str, int] = {}

    def run(self) -> None:
        while not self.mechanism.finished():
            wait = min(self.schedule.timeout(self.clock.now()), FAILURE_CHECK_S)
            self.mechanism.pump(wait)
            self.step()

    def step(self) -> None:
        """One turn: handle failures, then whatever timers are due."""
        events = self.mechanism.failures()
        if events:
            self.controller.noticed(events)
            shape = self.mechanism.shape
            self.oom_killed.update({e.node: shape.node(e.node).resources.memory_bytes
                                    for e in events if e.kind == EventKind.OOM_KILLED
                                    and shape.has_node(e.node)})  # fmt: skip
            # the policy first; if it left the kills alone, the mechanism's safety net
            if self.oom_killed and (self.decide() or self.grow_oom_killed(self.oom_killed)):
                self.oom_killed.clear()
            self.mechanism.recover()
        now = self.clock.now()
        if self.schedule.metrics_due(now):
            sample = self.mechanism.sample()
            if sample is not None:
                self.controller.record(sample)
                self.on_sample(sample)
                self.decide()
        if self.schedule.checkpoint_due(self.clock.now()):
            self.mechanism.checkpoint()

    def decide(self) -> bool:
        """Ask the policy; True if it planned a change that was applied. A plan that restarts
        the job's ranks is carried out only if it pays back its measured cost
        (:mod:`scaling.payback`); otherwise it is declined, and recorded as such."""
        time_s = self.clock.now() - self.started_at
        plan, observation = self.controller.consult(time_s, self.mechanism.shape,
                                                    self.mechanism.steps_done())  # fmt: skip
        if plan is None:
            return False
        cost = self.mechanism.restart_cost(plan)
        if cost is not None:
            verdict = payback(observation, plan.shape, cost, self.payback_rule)
            if not verdict.pays:
                self.mechanism.decline(plan, verdict.describe())
                return False
            plan = replace(plan, reason=f"{plan.reason}; {verdict.describe()}")
        return self.apply(plan)

    def apply(self, plan: Plan) -> bool:
        shape = self.mechanism.shape
        if not self.mechanism.apply(plan).applied:
            return False
        self.controller.applied(plan, shape, self.clock.now() - self.started_at)
        return True

    def grow_oom_killed(self, killed: dict[str, int]) -> bool:
        """Nodes the kernel OOM-killed (``killed``: their memory when they died) that the
        policy left alone are relaunched with twice their memory (:mod:`scaling.oom`; the
        simulator does the same). A policy that changes the shape in another way is
        asked again if the node is killed again. False if the relaunch was abandoned (a
        node died meanwhile): the kills are remedied together on the next failure turn."""
        shape = self.mechanism.shape
        left = self.controller.budget.memory_bytes - shape.total().memory_bytes
        plan = memory_doubled_after_oom(shape, killed, max(0, left))
        return plan is None or self.apply(plan)
