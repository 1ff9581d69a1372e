"""goodput and DLRover's reading without servers, on tables of hand-built observations."""

from __future__ import annotations

import pytest

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.core.spec import Strategy
from rightsize.scaling.api import (
    Action,
    MetricSample,
    NodeMetrics,
    Observation,
    Plan,
    WorkerRange,
)
from rightsize.scaling.dlrover import DLRoverPolicy
from rightsize.scaling.goodput import GoodputPolicy
from rightsize.scaling.registry import make_policy, policies_named, require_strategy

GI = 2**30
BUDGET = Resources(2, 8 * GI)


def ranks(n: int, cpu: float) -> ClusterShape:
    node = Resources(cpu, GI)
    return ClusterShape.from_counts(0, n, node, node)


def window(shape: ClusterShape, used: float, speeds: list[float]) -> tuple[MetricSample, ...]:
    return tuple(
        MetricSample(2.0 * i, tuple(NodeMetrics(n.name, NodeRole.WORKER, used,
                                                n.resources.cpu_cores)
                                    for n in shape.workers), speed)  # fmt: skip
        for i, speed in enumerate(speeds, 1)
    )


def observe(shape, used, speeds, plans=(), worker_range=WorkerRange()) -> Observation:
    plans = plans or (Plan(shape, Action.LAUNCH, "launch"),)
    free = Resources(BUDGET.cpu_cores - shape.total().cpu_cores, BUDGET.memory_bytes)
    return Observation("j", 100.0, shape, BUDGET, free, window=window(shape, used, speeds),
                       plans=tuple(plans), node_limit=Resources(2, 16 * GI),
                       worker_range=worker_range)  # fmt: skip


STEADY = [0.0, 5.0, 10.0, 10.0, 10.0]  # a start-up sample and a warming one, then steady


def test_a_saturated_rank_grows_in_place_within_the_budget():
    plan = GoodputPolicy().decide(observe(ranks(1, 0.5), 0.49, STEADY))
    assert plan.action == Action.SCALE_UP and plan.shape == ranks(1, 2.0)  # the whole budget
    assert plan.details == {"move": "grow", "from_speed": 10.0}
    plan = GoodputPolicy(growth=2).decide(observe(ranks(1, 0.5), 0.49, STEADY))
    assert plan.shape == ranks(1, 1.0)  # at most twice
    plan = GoodputPolicy(growth=2).decide(observe(ranks(1, 1.5), 1.45, STEADY))
    assert plan.shape == ranks(1, 2.0)  # 1.5 x 2 = 3, but the budget leaves 0.5


def test_nothing_is_judged_before_the_settled_samples():
    assert GoodputPolicy().decide(observe(ranks(1, 0.5), 0.49, STEADY[:1])) is None
    waits = GoodputPolicy(grow_after_samples=3)  # the first version: grows once judged
    assert waits.decide(observe(ranks(1, 0.5), 0.49, STEADY[:3])) is None
    assert waits.decide(observe(ranks(1, 0.5), 0.49, STEADY)).shape == ranks(1, 2.0)


def test_a_saturated_rank_grows_after_one_settled_sample_and_nothing_else_moves_so_soon():
    plan = GoodputPolicy().decide(observe(ranks(1, 0.5), 0.49, STEADY[:2]))
    assert plan.shape == ranks(1, 2.0) and plan.details == {"move": "grow", "from_speed": 5.0}
    # a rank below its quota waits for judge_samples before eq. 10 sets the world size
    assert GoodputPolicy().decide(observe(ranks(1, 2.0), 0.9, STEADY[:3])) is None
    assert GoodputPolicy().decide(observe(ranks(1, 2.0), 0.9, STEADY)).shape == ranks(2, 1.0)
    with pytest.raises(SpecError, match="grow_after_samples"):
        GoodputPolicy(grow_after_samples=4)


def test_a_growth_that_did_not_help_is_given_back_and_not_tried_again():
    launch = Plan(ranks(1, 1.0), Action.LAUNCH, "launch")
    grew = Plan(ranks(1, 2.0), Action.SCALE_UP, "grow", {"move": "grow", "from_speed": 10.0})
    obs = observe(ranks(1, 2.0), 1.95, [0.0, 5.0, 10.2, 10.2, 10.2], plans=(launch, grew))
    plan = GoodputPolicy().decide(obs)
    assert plan.shape == ranks(1, 1.0) and plan.details["move"] == "give_back"
    gave = Plan(ranks(1, 1.0), Action.RESHAPE, "back", {"move": "give_back", "from_speed": 10.2})
    again = observe(ranks(1, 1.0), 0.99, STEADY, plans=(launch, grew, gave))
    plan = GoodputPolicy().decide(again)  # saturated, but more cpu did not help: not again;
    assert plan.shape == ranks(2, 1.0)  # a rank needs its one core: eq. 10 with w_hat = 1


def test_ranks_below_their_quota_set_the_world_size_by_eq10():
    # one rank of 2 cpu uses 0.9: w_hat 0.9, N_w = 2 / 0.9 -> 2 ranks of 1 cpu
    plan = GoodputPolicy().decide(observe(ranks(1, 2.0), 0.9, STEADY))
    assert plan.action == Action.ADD_WORKER and plan.shape == ranks(2, 1.0)
    assert "eq. 10" in plan.reason
    capped = observe(ranks(1, 2.0), 0.45, STEADY, worker_range=WorkerRange(1, 3))
    assert GoodputPolicy().decide(capped).shape.n_workers == 3  # 2 / 0.5 = 4, at most 3


def test_a_few_slow_samples_late_in_a_shape_do_not_send_it_back():
    # nanoGPT's evaluation pass: a few samples with few optimizer steps, long after the growth
    launch = Plan(ranks(1, 0.5), Action.LAUNCH, "launch")
    grew = Plan(ranks(1, 2.0), Action.SCALE_UP, "grow", {"move": "grow", "from_speed": 10.0})
    speeds = [0.0] + [30.0] * 30 + [2.0, 1.0, 2.0, 1.0]
    plan = GoodputPolicy().decide(observe(ranks(1, 2.0), 1.0, speeds, plans=(launch, grew)))
    assert plan is None or plan.details["move"] != "revert", plan


def test_a_slower_shape_goes_back_to_the_fastest_measured():
    launch = Plan(ranks(1, 2.0), Action.LAUNCH, "launch")
    moved = Plan(ranks(2, 1.0), Action.ADD_WORKER, "eq 10", {"move": "reshape",
                                                             "from_speed": 20.0})  # fmt: skip
    plan = GoodputPolicy().decide(observe(ranks(2, 1.0), 0.5, [0, 5, 15, 15, 15],
                                          plans=(launch, moved)))  # fmt: skip
    assert plan.shape == ranks(1, 2.0) and plan.details["move"] == "revert"
    assert plan.action == Action.REMOVE_WORKER


def test_goodput_sizes_allreduce_jobs_only():
    with pytest.raises(SpecError, match="not ps"):
        require_strategy(make_policy("goodput"), Strategy.PS)
    with pytest.raises(SpecError):
        policies_named(["goodput"])  # the simulator's jobs have parameter servers
    with pytest.raises(SpecError):
        GoodputPolicy(growth=1.0)


def test_dlrover_samples_w_hat_in_place_then_sets_the_ranks_by_eq10():
    policy = DLRoverPolicy()
    sampled = policy.decide(observe(ranks(1, 0.5), 0.49, [10.0] * 60))
    assert sampled.shape == ranks(1, 1.0) and sampled.details["stage"] == "sample"
    # at 2 cpu a rank uses 0.95: w_hat rounds up to 1 (the budget's 5% step is 0.1) -> 2 ranks
    launch = Plan(ranks(1, 2.0), Action.LAUNCH, "launch")
    optimized = policy.decide(observe(ranks(1, 2.0), 0.95, [10.0] * 60, plans=(launch,)))
    assert optimized.shape == ranks(2, 1.0) and optimized.details["stage"] == "optimize"
    done = observe(ranks(2, 1.0), 0.95, [10.0] * 60, plans=(launch, optimized))
    assert policy.decide(done) is None  # eq. 10 once
