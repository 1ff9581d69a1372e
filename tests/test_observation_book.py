"""The observation book and the plan check that the runtime and the simulator share, on numbers
checked by hand."""

import dataclasses
import math

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.core.spec import Strategy
from rightsize.scaling.api import (
    Action,
    EventKind,
    MetricSample,
    NodeEvent,
    Observation,
    Plan,
    ShapeRecord,
    WorkerRange,
    window_speed,
)
from rightsize.scaling.book import ObservationBook
from rightsize.scaling.plan_check import plan_problems

GI = 2**30
SHAPE = ClusterShape.from_counts(1, 2, Resources(2, GI), Resources(4, GI))  # 10 cpu, 3 GiB
BIGGER = SHAPE.with_node_added(NodeRole.WORKER, Resources(4, GI))  # 14 cpu, 4 GiB
LAUNCH = Plan(SHAPE, Action.LAUNCH, "launch")


def samples(*speeds: float, start_s: float = 60.0) -> tuple[MetricSample, ...]:
    return tuple(MetricSample(start_s + 60.0 * i, (), v) for i, v in enumerate(speeds))


def book(**fields) -> ObservationBook:
    return ObservationBook("j", Resources(20, 8 * GI), 1000, Resources(16, 64 * GI), **fields)


def test_window_speed_is_the_exactly_rounded_mean():
    assert window_speed(samples(1.0, 2.0, 4.5)) == 2.5
    for one in (1.5, 0.0, -0.0):  # one sample's shortcut: the fsum's float, sign of zero too
        assert repr(window_speed(samples(one))) == repr(math.fsum([one]))
    # a plain left-to-right sum loses the 1.0 between the two large values; fsum does not
    assert window_speed(samples(1e16, 1.0, -1e16)) == 1.0 / 3
    assert Observation("j", 0, SHAPE, Resources(), Resources()).mean_speed() == 0.0


def test_a_plan_records_the_speed_the_old_shape_measured_and_starts_a_new_window():
    b = book(plans=(LAUNCH,))
    b.record(samples(1.0, 2.0, 3.0))
    b.noticed([NodeEvent(100.0, "worker-1", EventKind.FAILED)])
    assert b.decisions == 0 and len(b.window) == 3 and len(b.events) == 1
    grow = Plan(BIGGER, Action.ADD_WORKER, "more")
    b.applied(grow, SHAPE, 200.0)
    assert b.history == (ShapeRecord(SHAPE, 2.0),)  # (1 + 2 + 3) / 3
    assert b.window == () and b.events == () and b.plans == (LAUNCH, grow)
    assert b.decisions == 1 and b.shape_since_s == 200.0
    b.applied(Plan(SHAPE, Action.RESHAPE, "back"), BIGGER, 210.0)  # nothing measured at BIGGER
    assert len(b.history) == 1 and b.decisions == 2


def test_a_launch_is_applied_like_any_plan_but_is_no_decision():
    b = book()
    b.applied(LAUNCH, ClusterShape(), 0.0)
    assert b.plans == (LAUNCH,) and b.decisions == 0 and b.history == ()


def test_a_bounded_window_keeps_only_samples_after_the_cutoff():
    b = book()
    b.record(samples(1.0, 2.0, 3.0))  # at 60, 120, 180 s
    b.record(samples(4.0, start_s=240.0), keep_after_s=120.0)
    assert [s.time_s for s in b.window] == [180.0, 240.0]
    b.record(samples(5.0, start_s=300.0), keep_after_s=400.0)
    assert b.window == ()


def test_the_observation_carries_every_field_and_equals_the_plainly_built_one():
    prior = (ShapeRecord(SHAPE, 1.5),)
    b = book(plans=(LAUNCH,), prior=prior, shape_since_s=30.0)
    b.record(samples(1.0))
    fast = b.observe(90.0, SHAPE, Resources(6, GI), 42)
    fields = {
        "job": "j", "time_s": 90.0, "shape": SHAPE, "budget": Resources(20, 8 * GI),
        "free": Resources(6, GI), "window": b.window, "events": (), "history": (),
        "decisions": 0, "steps_done": 42, "steps_total": 1000, "plans": (LAUNCH,),
        "prior": prior, "node_limit": Resources(16, 64 * GI), "shape_since_s": 30.0,
        "worker_range": WorkerRange(),
    }  # fmt: skip
    assert set(fields) == {f.name for f in dataclasses.fields(Observation)}  # every field
    plain = Observation(**fields)
    assert fast == plain and repr(fast) == repr(plain)
    assert fast.headroom == plain.headroom == Resources(6, GI)  # 10 cpu of budget left, 6 free
    assert fast.readings is b.readings  # the book's, for this window


def test_readings_are_computed_once_per_window_and_start_over_when_it_changes():
    b = book(plans=(LAUNCH,))
    b.record(samples(1.0, 2.0))
    calls = []

    def read() -> int:
        calls.append(1)
        return len(calls)

    first = b.observe(120.0, SHAPE, Resources(6, GI), 1)
    again = b.observe(150.0, SHAPE, Resources(6, GI), 1)  # the same window, a later time
    assert first.readings.of("n", read) == again.readings.of("n", read) == 1
    assert first.readings.of("other key", read) == 2
    b.record(samples(3.0, start_s=180.0))
    assert b.observe(180.0, SHAPE, Resources(6, GI), 1).readings.of("n", read) == 3
    b.record((), keep_after_s=0.0)  # nothing left the window: still the same readings
    assert b.observe(180.0, SHAPE, Resources(6, GI), 1).readings.of("n", read) == 3
    b.applied(Plan(BIGGER, Action.ADD_WORKER, "more"), SHAPE, 200.0)
    assert b.observe(200.0, BIGGER, Resources(6, GI), 1).readings.of("n", read) == 4
    # An observation built directly, or replaced, reads its own window.
    plain = dataclasses.replace(first, time_s=121.0)
    assert plain.readings is not first.readings and plain.readings.of("n", read) == 5
    # What is read from the job's prior and budget lasts the job's life, windows and plans.
    assert first.job_readings.of("prior", read) == 6
    assert b.observe(200.0, BIGGER, Resources(6, GI), 1).job_readings.of("prior", read) == 6
    assert book().observe(0.0, SHAPE, Resources(6, GI), 0).job_readings.of("prior", read) == 7


def test_close_lets_go_of_what_only_the_policy_read():
    b = book(plans=(LAUNCH,))
    b.record(samples(1.0))
    b.applied(Plan(BIGGER, Action.ADD_WORKER, "more"), SHAPE, 60.0)
    b.close()
    assert b.window == b.events == b.history == b.plans == ()


# -- the plan check ----------------------------------------------------------------------
BUDGET = Resources(14, 8 * GI)
PS_LIMITS = {
    "budget": BUDGET, "strategy": Strategy.PS, "held": SHAPE.total(),
    "free": Resources(4, GI), "node_limit": Resources(8, 4 * GI),
}  # fmt: skip


def test_a_plan_within_every_limit_has_no_problems():
    assert plan_problems(BIGGER, **PS_LIMITS) == []  # 14 cpu of 14; grows by 4 cpu of 4 free


@pytest.mark.parametrize(
    ("shape", "limits", "problem"),
    [
        # 3 nodes may round up by a millicore each: 14.003 passes, 14.004 does not
        (ClusterShape.from_counts(1, 2, Resources(2.004, GI), Resources(6, GI)),
         {"budget": BUDGET}, "14.004 cpu exceeds the budget 14"),
        (ClusterShape.from_counts(1, 2, Resources(2, 4 * GI), Resources(6, 4 * GI)),
         {"budget": BUDGET}, "exceed the budget 8589934592"),
        (BIGGER.with_node_added(NodeRole.WORKER, Resources(0.5, GI)),
         {**PS_LIMITS, "budget": Resources(20, 8 * GI), "free": Resources(4, 8 * GI)},
         "more than the 4 free cpu"),
        (BIGGER, {**PS_LIMITS, "free": Resources(4, 0)}, "more than the 0 free memory bytes"),
        (ClusterShape.from_counts(1, 1, Resources(2, GI), Resources(9, GI)),
         PS_LIMITS, "worker-0 exceeds the 8-cpu node limit"),
        (ClusterShape.from_counts(1, 1, Resources(2, GI), Resources(4, 5 * GI)),
         {**PS_LIMITS, "free": None}, "node limit's 4294967296 bytes"),
        (SHAPE.without_node("ps-0"), {"budget": BUDGET}, "at least one parameter server"),
        (ClusterShape.from_counts(1, 0, Resources(2, GI), Resources(4, GI)),
         {"budget": BUDGET}, "at least one worker"),
        (SHAPE, {"budget": BUDGET, "strategy": Strategy.ALLREDUCE}, "allreduce has no parameter servers"),
        (ClusterShape.from_counts(1, 2, Resources(2, GI), Resources(4, 0)),
         {"budget": BUDGET}, "every node needs some memory"),
        (ClusterShape.from_counts(1, 2, Resources(0, GI), Resources(4, GI)),
         {"budget": BUDGET}, "every node needs some cpu"),
    ],
)  # fmt: skip
def test_each_rule_names_itself(shape, limits, problem):
    problems = plan_problems(shape, **limits)
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_budget_without_memory_leaves_memory_unlimited():
    """The simulator's traces give CPU budgets only (memory 0), and its nodes no memory."""
    cpu_only = ClusterShape.from_counts(1, 2, Resources(2), Resources(4))
    assert plan_problems(cpu_only, Resources(10)) == []
    assert plan_problems(SHAPE, Resources(10)) == []  # 3 GiB against no limit


def test_the_millicore_slack_is_one_per_node():
    at_slack = ClusterShape.from_counts(1, 2, Resources(2.003, GI), Resources(6, GI))
    assert plan_problems(at_slack, BUDGET) == []
    assert math.isclose(at_slack.total().cpu_cores, 14.003)
