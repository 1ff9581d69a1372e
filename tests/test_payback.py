"""The payback rule, on hand-built observations with hand-computed verdicts."""

from __future__ import annotations

import math

import pytest

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling.api import MetricSample, NodeMetrics, Observation, ShapeRecord
from rightsize.scaling.payback import (
    PaybackRule,
    RestartCost,
    capacity,
    payback,
    predicted_speed,
    remaining_s,
    unconstrained_cores,
)

GI = 2**30


def ranks(n: int, cpu: float) -> ClusterShape:
    node = Resources(cpu, GI)
    return ClusterShape.from_counts(0, n, node, node)


def observation(shape: ClusterShape, used: float, speed: float, time_s: float = 100.0,
                history=(), steps=(None, 0)) -> Observation:  # fmt: skip
    """Four samples at ``speed`` steps/s with every rank using ``used`` cores."""
    samples = tuple(
        MetricSample(t, tuple(NodeMetrics(n.name, NodeRole.WORKER, used, n.resources.cpu_cores)
                              for n in shape.workers), speed)  # fmt: skip
        for t in (92.0, 94.0, 96.0, 98.0)
    )
    total, done = steps
    return Observation("j", time_s, shape, Resources(2, 8 * GI), Resources(2, 8 * GI),
                       window=samples, history=tuple(history), steps_total=total,
                       steps_done=done)  # fmt: skip


def test_unconstrained_cores_are_known_only_below_the_quota():
    assert unconstrained_cores(observation(ranks(1, 2.0), 1.2, 10.0), 0.9) == pytest.approx(1.2)
    assert unconstrained_cores(observation(ranks(1, 1.0), 0.95, 10.0), 0.9) == math.inf


def test_eq1_for_synchronous_ranks_waits_for_the_slowest():
    shape = ClusterShape.from_counts(0, 2, Resources(1, GI), Resources(1, GI))
    uneven = shape.with_resources("worker-1", Resources(0.5, GI))
    assert capacity(shape, math.inf) == 2.0
    assert capacity(uneven, math.inf) == 1.0  # 2 ranks x the slower's 0.5
    assert capacity(shape, 0.6) == 1.2  # each uses at most w_hat


def test_a_rank_that_cannot_use_its_cpu_gains_from_more_ranks():
    # one rank of 2 cpu using 1.2: eq. 1 says 2 ranks of 1 cpu run 2 x 1 / (1 x 1.2) faster
    obs = observation(ranks(1, 2.0), 1.2, 30.0, time_s=100.0)
    speed, how = predicted_speed(obs, ranks(2, 1.0), PaybackRule())
    assert how == "eq. 1" and speed == pytest.approx(50.0)
    # gain = 100 s left (as long again) x (1 - 30/50) = 40 s; cost = 8 + 0 = 8 s: pays
    verdict = payback(obs, ranks(2, 1.0), RestartCost(8.0, True))
    assert verdict.pays and verdict.gain_s == pytest.approx(40.0) and verdict.cost_s == 8.0
    assert verdict.remaining_by == "as long again"


def test_splitting_a_busy_rank_gains_nothing_and_is_declined():
    obs = observation(ranks(1, 2.0), 1.95, 30.0)  # held back by its quota: w_hat unknown
    verdict = payback(obs, ranks(2, 1.0), RestartCost(0.5, False))
    assert verdict.speed_then == pytest.approx(30.0) and not verdict.pays  # 2 x 1 = 1 x 2
    assert "does not pay back" in verdict.describe()


def test_a_measured_shape_is_predicted_by_its_measurement():
    obs = observation(ranks(1, 2.0), 1.2, 30.0, history=[ShapeRecord(ranks(2, 1.0), 33.0)])
    speed, how = predicted_speed(obs, ranks(2, 1.0), PaybackRule())
    assert (speed, how) == (33.0, "measured")


def test_lost_training_is_redone_at_the_new_speed():
    obs = observation(ranks(1, 2.0), 1.2, 30.0)
    # cost = 8 + 50 x 30/50 = 38 s against a gain of 40 s: still pays, by 2 s
    assert payback(obs, ranks(2, 1.0), RestartCost(8.0, True, lost_s=50.0)).pays
    # with 60 s lost: 8 + 36 = 44 > 40
    assert not payback(obs, ranks(2, 1.0), RestartCost(8.0, True, lost_s=60.0)).pays


def test_the_remaining_work_comes_from_the_length_when_known():
    obs = observation(ranks(1, 2.0), 1.2, 30.0, steps=(4000, 1000))
    assert remaining_s(obs, 30.0) == (100.0, "steps_total")
    # 100 s left x (1 - 30/50) = 40 s of gain against a 10 s restart
    assert payback(obs, ranks(2, 1.0), RestartCost(10.0, True)).pays


def test_a_script_of_so_many_steps_gains_only_what_makes_each_step_faster():
    # a script's own 600 steps left: every rank takes each, so its speed is per world
    obs = observation(ranks(1, 2.0), 1.2, 30.0)
    split = payback(obs, ranks(2, 1.0), RestartCost(1.0, True, steps_left=600))
    assert split.remaining_s == 20.0 and split.remaining_by == "steps left"
    assert split.speed_then == pytest.approx(25.0) and not split.pays  # 50 steps/s over 2 ranks
    grown = observation(ranks(2, 0.5), 0.2, 30.0)  # 2 ranks waiting: w_hat 0.2 of 0.5
    faster = payback(grown, ranks(2, 1.0), RestartCost(1.0, True, steps_left=600))
    assert faster.speed_then == pytest.approx(15.0) and not faster.pays  # w_hat binds: no gain


def test_no_speed_no_move_and_bad_parameters_are_refused():
    obs = observation(ranks(1, 2.0), 1.2, 0.0)
    assert not payback(obs, ranks(2, 1.0), RestartCost(1.0, True)).pays
    with pytest.raises(SpecError):
        PaybackRule(margin=0)
