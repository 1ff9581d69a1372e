"""A policy sees the same job alike through the runtime and through the simulator.

Both mechanisms keep what a policy may know in an ``ObservationBook``, start a job by
``scaling.launch``, raise plans to memory floors by ``scaling.floors`` and check plans by
``plan_check``; this suite holds them to it from outside. For every policy in the registry,
one scripted job — the same metric samples, the same node failure, the same progress and
free capacity — runs through the runtime's ``Controller`` and ``ControlLoop`` (a fake clock
and a fake mechanism that raises plans to the floors and refuses what ``reshape.rejection``
refuses, as ``Master.apply`` does) and through the simulator's ``SimJob`` (samples recorded
as ``SimJob.collect`` records them, observations built by the simulator's ``_observe``, the
launch by its ``_launch_plan``, plans by its ``_plan`` and applied by ``SimJob.restart``).
Every observation must be equal field by field, and so every decision. Both mechanisms take
the floors of the simulator's job model here (the runtime measures its own with torch).

The samples come from the simulator's own performance model for the shape the job runs at
that moment, with 2% noise drawn from a generator seeded by the time, so both paths read the
same numbers as long as they agree on the shape — and diverge visibly if they do not.
"""

import dataclasses

import numpy as np
import pytest

from rightsize.cluster.clusters import CLUSTERS
from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import JobModel
from rightsize.cluster.models import sim_model
from rightsize.cluster.priors import PriorBook
from rightsize.cluster.simjob import SimJobState, measured_row, sample_template
from rightsize.cluster.simulator import Simulator, _Run
from rightsize.cluster.traces import Trace, TraceJob
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import Strategy
from rightsize.runtime.clock import FakeClock
from rightsize.runtime.control import Controller, ControlLoop, Schedule, Transition
from rightsize.runtime.reshape import rejection
from rightsize.scaling.api import (
    EventKind,
    LaunchRequest,
    MetricSample,
    NodeEvent,
    Observation,
    Plan,
    Policy,
)
from rightsize.scaling.floors import floored_plan
from rightsize.scaling.launch import launch_plan
from rightsize.scaling.registry import make_policy, policy_names

CLUSTER = CLUSTERS["B"]
MODEL = "resnet50"
#: A model whose workers need more than DLRover's default 4 GiB: its launch is raised to
#: the floors (the floors bind nowhere for the other policies: CPU budgets, no memory).
FLOORED_MODEL = "mobilenet"
BUDGET = Resources(60)  # CPU only, as the traces give it: memory is not limited
STEPS_TOTAL = 100_000
INTERVAL_S = 60.0  # the metric interval, and the simulator's decision interval
END_S = 40 * INTERVAL_S  # long enough for several decisions of every adaptive policy
STEPS_PER_S = 2.5  # the scripted progress, the same on both paths
FAILURE = NodeEvent(150.0, "worker-1", EventKind.FAILED, "exit code 1")  # between two samples
FREE = CLUSTER.capacity  # nothing else runs: what the simulator's scheduler has free
# The simulator keeps at most SimConfig.max_window_s of window and the runtime all of it
# since the last plan; the script keeps every window shorter than either bound.
MAX_WINDOW_S = END_S + INTERVAL_S


class Metrics:
    """What a metric collector reads from the job at ``time_s`` when it runs ``shape``."""

    def __init__(self, model: str) -> None:
        self.model = JobModel(sim_model(model), CLUSTER)
        self.templates: dict = {}

    def at(self, time_s: float, shape: ClusterShape) -> MetricSample:
        perf = self.model.evaluate(shape)
        template = sample_template(self.templates, perf, CLUSTER.link_bytes_per_s)
        draws = np.random.default_rng(int(time_s)).standard_normal(len(template.true))
        row = measured_row(template.true, 0.02, draws.tolist(), template.cap)
        return template.sample(time_s, row, self.model.model.batch_size)


def recorded(policy: Policy) -> list[tuple[Observation, Plan | None]]:
    """Every (observation, decision) ``policy`` answers from now on."""
    log: list[tuple[Observation, Plan | None]] = []
    decide = policy.decide

    def recording(observation: Observation) -> Plan | None:
        plan = decide(observation)
        log.append((observation, plan))
        return plan

    policy.decide = recording  # an instance attribute: this object only
    return log


def floors(metrics: Metrics, plan: Plan) -> Plan:
    """``plan`` raised to the floors, as the runtime's master raises every plan."""
    return floored_plan(plan, metrics.model.memory_floors(plan.shape))


def steps_done(time_s: float) -> int:
    return int(STEPS_PER_S * time_s)


# -- the runtime ---------------------------------------------------------------------------
class ScriptedJob:
    """The runtime's mechanism for a job whose metrics come from :class:`Metrics`."""

    def __init__(self, clock: FakeClock, shape: ClusterShape, metrics: Metrics) -> None:
        self.clock, self.shape, self.metrics = clock, shape, metrics
        self.failed = False

    def pump(self, timeout_s: float) -> None:
        self.clock.sleep(timeout_s)

    def sample(self) -> MetricSample:
        return self.metrics.at(self.clock.now(), self.shape)

    def checkpoint(self) -> None:
        pass

    def failures(self) -> list[NodeEvent]:
        if self.failed or self.clock.now() < FAILURE.time_s:
            return []
        self.failed = True
        return [FAILURE]

    def recover(self) -> None:
        pass

    def restart_cost(self, plan):
        return None  # nothing restarts here

    def decline(self, plan, why):
        raise AssertionError("nothing is declined without a restart cost")

    def apply(self, plan: Plan) -> Transition:
        plan = floors(self.metrics, plan)
        if rejection(plan.shape, BUDGET, Strategy.PS):
            return Transition(False)
        self.shape = plan.shape
        return Transition(True)

    def finished(self) -> bool:
        return self.clock.now() >= END_S

    def steps_done(self) -> int:
        return steps_done(self.clock.now())


def through_the_runtime(name: str, model: str, prior) -> tuple[Plan, list]:
    policy, metrics = make_policy(name), Metrics(model)
    request = LaunchRequest("job", BUDGET, FREE, prior, CLUSTER.node_limit)
    plan = floors(metrics, launch_plan(policy, request))  # initial_shape: auto
    log = recorded(policy)
    clock = FakeClock()
    controller = Controller(
        "job", policy, BUDGET, lambda _shape: FREE, STEPS_TOTAL, CLUSTER.node_limit,
        [plan], 0.0, prior,
    )  # fmt: skip
    mechanism = ScriptedJob(clock, plan.shape, metrics)
    schedule = Schedule(0.0, INTERVAL_S, 10 * END_S)
    ControlLoop(controller, mechanism, clock, schedule, 0.0).run()
    return plan, log


# -- the simulator -------------------------------------------------------------------------
def through_the_simulator(name: str, model: str, prior) -> tuple[Plan, list]:
    policy, metrics = make_policy(name), Metrics(model)
    batch = metrics.model.model.batch_size
    spec = TraceJob("job", 0.0, model, BUDGET, samples_total=float(STEPS_TOTAL * batch))
    run = _Run(Simulator(CLUSTER, policy, SimConfig()), Trace("conformance", (spec,)))
    job = run.jobs[0]
    run.priors = Priors(prior)
    launch, own = run._launch_plan(job, FREE)
    assert run._fits(job, launch, own, FREE)
    job.started_s = 0.0
    apply(job, launch, 0.0)
    log = recorded(policy)
    for k in range(1, int(END_S / INTERVAL_S) + 1):
        now = run.now = k * INTERVAL_S
        if now - INTERVAL_S < FAILURE.time_s <= now:  # (a failure alone asks the policy nothing)
            job.book.noticed([FAILURE])
        job.book.record((metrics.at(now, job.shape),), job.rel(now - MAX_WINDOW_S))
        job.samples_done = float(steps_done(run.now) * batch)
        plan = run._plan(job, run._observe(job))
        if plan is not None:
            apply(job, plan, run.now)
            assert job.state == SimJobState.RUNNING
    return launch, log


class Priors:
    """The simulator's prior book, answering with the runtime path's prior."""

    def __init__(self, prior) -> None:
        self.known = prior

    def prior(self, _policy, _model, _budget):
        return self.known


def apply(job, plan: Plan, now: float) -> None:
    job.restart(now, plan, 0.0)
    job.ready(now)


# -- the suite -----------------------------------------------------------------------------
def prior_of(name: str, model: str):
    return PriorBook().prior(make_policy(name), JobModel(sim_model(model), CLUSTER), BUDGET)


@pytest.mark.parametrize("model", [MODEL, FLOORED_MODEL])
@pytest.mark.parametrize("name", policy_names(Strategy.PS))  # the simulator's jobs
def test_the_runtime_and_the_simulator_show_a_policy_the_same_job(name, model):
    prior = prior_of(name, model)
    runtime_launch, runtime = through_the_runtime(name, model, prior)
    simulated_launch, simulated = through_the_simulator(name, model, prior)
    assert runtime_launch == simulated_launch
    assert [o.time_s for o, _ in runtime] == [o.time_s for o, _ in simulated]
    for (real, real_plan), (sim, sim_plan) in zip(runtime, simulated, strict=True):
        for field in dataclasses.fields(Observation):
            assert getattr(real, field.name) == getattr(sim, field.name), (
                f"{name} at {real.time_s} s: {field.name} differs"
            )
        assert real_plan == sim_plan, f"{name} at {real.time_s} s"


ADAPTIVE = ("nearchus", "nearchus+", "dlrover", "optimus")


@pytest.mark.parametrize("name", ADAPTIVE)
def test_the_script_makes_every_adaptive_policy_decide(name):
    """Not a vacuous comparison: each adaptive policy changes the job's shape during the
    script, so the books' transitions (history, plans, a new window) are compared too."""
    _, log = through_the_runtime(name, MODEL, prior_of(name, MODEL))
    assert any(plan is not None for _, plan in log)
    assert any(o.history for o, _ in log) and any(o.events for o, _ in log)


def test_the_floors_bind_in_the_script():
    """Not vacuous either: DLRover's launch on the floored model is raised to the floors,
    alike on both paths (the comparison above)."""
    launch, _ = through_the_runtime("dlrover", FLOORED_MODEL, prior_of("dlrover", FLOORED_MODEL))
    assert "memory raised to floors" in launch.reason
