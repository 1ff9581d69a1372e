"""The launch advisor: initial shape, else history, else prediction, else policy; and the
fair share at launch, the same rule for the service and the simulator."""

from __future__ import annotations

import pytest

from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import ClusterSpec, SimModel
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import Trace, TraceJob
from rightsize.core.errors import UnknownNameError, choose
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import LaunchRequest, ShapeRecord
from rightsize.scaling.dlrover import ADJUST, DLRoverPolicy
from rightsize.scaling.launch import INITIAL_SHAPE_REASON
from rightsize.scaling.launch_advisor import (
    FairShare,
    LaunchAdvisor,
    LaunchShare,
    LaunchSource,
    PastRun,
    fastest_measured,
)
from rightsize.scaling.nearchus import NearchusPolicy
from rightsize.scaling.registry import make_policy
from rightsize.scaling.static import StaticPolicy

GI = 2**30
NODE = Resources(0.5, GI)
FASTEST = ClusterShape.from_counts(1, 1, NODE, NODE)
BUDGET = Resources(2.0, 4 * GI)


def request(free: Resources = BUDGET, prior: tuple[ShapeRecord, ...] = ()) -> LaunchRequest:
    return LaunchRequest("job", BUDGET, free, prior, Resources(8.0, 16 * GI))


def past(speed: float = 40.0, shape: ClusterShape = FASTEST) -> PastRun:
    return PastRun("first", ShapeRecord(shape, speed))


def test_a_launch_from_history_is_the_policys_starting_point():
    """DLRover started at the shape a similar run measured fastest is in its adjusting stage
    (§4.3), not sampling it away; a policy that ignores history still starts there."""
    for policy, stage in ((DLRoverPolicy(), ADJUST), (NearchusPolicy(), None)):
        launch = LaunchAdvisor(policy).advise(request(), history=(past(20.0), past(40.0)))
        plan = launch.plan
        assert launch.source == LaunchSource.HISTORY
        assert plan.shape == FASTEST and plan.details["from_run"] == "first"
        assert plan.reason.startswith("history: first ran") and "40 steps/s" in plan.reason
        assert plan.details.get("stage") == stage, (policy.name, plan.details)


def test_the_sources_in_their_order():
    advisor = LaunchAdvisor(StaticPolicy())
    initial = ClusterShape.from_counts(1, 2, NODE, NODE)
    named = advisor.advise(request(), initial, history=(past(),))
    assert named.source == LaunchSource.INITIAL_SHAPE and named.plan.shape == initial
    assert named.plan.reason == INITIAL_SHAPE_REASON
    # history's shape does not fit what is free now but would fit the capacity: it waits
    tight = request(free=Resources(0.5, GI))
    waits = advisor.advise(tight, history=(past(),), capacity=Resources(8.0, 16 * GI))
    assert waits == type(waits)(None, LaunchSource.HISTORY)
    # it never could (a capacity below its 1 cpu): the policy plans, from history's records
    never = advisor.advise(tight, history=(past(),), capacity=Resources(0.8, 16 * GI))
    assert never == type(never)(None, LaunchSource.POLICY)  # (its 2 cpu are not free either)
    predicted = advisor.advise(request(prior=(ShapeRecord(FASTEST, 1.0),)))
    assert predicted.source == LaunchSource.PREDICTION
    alone = advisor.advise(request())
    assert alone.source == LaunchSource.POLICY and alone.plan.shape.total() == BUDGET


def test_fastest_measured_fits_the_budget_and_what_is_free():
    big = ClusterShape.from_counts(1, 4, NODE, NODE)  # 2.5 cpu: fitted into the 2-cpu budget
    plan = fastest_measured((past(10.0), past(30.0, big)), BUDGET, BUDGET)
    assert plan.shape.total().fits_within(BUDGET) and "fitted into the budget" in plan.reason
    assert fastest_measured((), BUDGET, BUDGET) is None
    assert fastest_measured((past(),), BUDGET, Resources(0.5, GI)) is None


def test_a_fair_share_holds_a_policys_launch_to_an_even_split():
    fair = FairShare(1.0, 4, 4.0)
    held = LaunchAdvisor(make_policy("dlrover"), LaunchShare.FAIR).advise(request(), fair=fair)
    assert held.plan.shape.total().cpu_cores <= 1.0
    assert "within a fair share of 1 cpu (4 jobs want the service's 4 cpu)" in held.plan.reason
    free = LaunchAdvisor(StaticPolicy(), LaunchShare.FREE).advise(request(), fair=fair)
    assert free.plan.shape.total() == BUDGET  # free: the whole budget, as NEARCHUS's allocator
    # NEARCHUS+ cannot plan within 1 cpu: it launches from its own budget, as ever
    own = LaunchAdvisor(make_policy("nearchus+"), LaunchShare.FAIR).advise(request(), fair=fair)
    assert own.plan is not None and "fair share" not in own.plan.reason


def test_unknown_modes_are_refused_by_name():
    with pytest.raises(UnknownNameError, match="unknown launch share 'fiar'"):
        LaunchAdvisor(StaticPolicy(), "fiar")
    with pytest.raises(UnknownNameError, match="unknown launch share 'fiar'; did you mean 'fair'"):
        choose(LaunchShare, "fiar", "launch share")
    with pytest.raises(UnknownNameError, match="unknown launch source 'guess'"):
        choose(LaunchSource, "guess", "launch source")
    stored = "job file"  # what the store holds for a job that named its shape
    assert choose(LaunchSource, stored, "launch source") is LaunchSource.INITIAL_SHAPE


TOY = SimModel("toy", 100, (60, 40), 1.0, 10, 0.1, 1000)
TOY_CLUSTER = ClusterSpec("toy", 30, 10**12, 100, 10**11, 1e9)


@pytest.mark.parametrize("share", [LaunchShare.FREE, LaunchShare.FAIR])
def test_the_simulator_launches_through_the_same_advisor(share):
    """One job holds the 30-cpu cluster; three wait behind it, each budgeted all of it. When
    it ends, ``free`` starts the first alone (NEARCHUS's allocator, every pinned result);
    ``fair`` starts the three side by side within 10 cpu each."""
    jobs = [TraceJob("a", 0, "toy", Resources(30), samples_total=1000.0)] + [
        TraceJob(name, 10 + i, "toy", Resources(30), samples_total=1000.0)
        for i, name in enumerate("bcd")
    ]
    sim = Simulator(TOY_CLUSTER, StaticPolicy(), SimConfig(), models=lambda _name: TOY,
                    launch_share=share)  # fmt: skip
    result = sim.run(Trace("t", tuple(jobs)))
    started = {job.name: job.arrival_s + job.queue_s for job in result.jobs}
    if share == LaunchShare.FAIR:
        assert started["b"] == started["c"] == started["d"] > started["a"]
    else:
        assert started["b"] < started["c"] < started["d"]
