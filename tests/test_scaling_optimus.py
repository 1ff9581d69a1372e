"""Optimus as NEARCHUS §V runs it, and FA-BF: fitted speed models and fixed 5-vCPU nodes."""

import pytest

from rightsize.core.errors import SpecError, UnknownNameError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import (
    Action,
    LaunchRequest,
    MetricSample,
    Observation,
    ShapeRecord,
)
from rightsize.scaling.optimus import OptimusPolicy, SpeedModel, speed_points
from rightsize.scaling.registry import make_policy, policy_names
from rightsize.scaling.static import FaBfPolicy

NODE = Resources(5)


def shape(p: int, w: int) -> ClusterShape:
    return ClusterShape.from_counts(p, w, NODE, NODE)


def async_speed(p, w, theta=(2.0, 1.0, 0.1, 0.5)):
    """f = w / (θ0 + θ1·w/p + θ2·w + θ3·p)."""
    return w / (theta[0] + theta[1] * w / p + theta[2] * w + theta[3] * p)


def test_async_model_recovers_its_coefficients_from_exact_points():
    points = [(p, w, async_speed(p, w)) for p, w in [(1, 1), (1, 2), (2, 2), (2, 4), (3, 5)]]
    model = SpeedModel.fit(points, "async")
    assert model.theta == pytest.approx((2.0, 1.0, 0.1, 0.5), abs=1e-6)
    # f(2, 6) = 6 / (2 + 3 + 0.6 + 1) = 0.909
    assert model.predict(2, 6) == pytest.approx(6 / 6.6)


def test_sync_model_recovers_its_coefficients():
    theta, batch = (0.01, 0.5, 0.2, 0.05, 0.1), 100.0

    def f(p, w):
        return 1 / (
            theta[0] * batch / w + theta[1] + theta[2] * w / p + theta[3] * w + theta[4] * p
        )

    pairs = [(1, 1), (1, 2), (2, 2), (2, 4), (3, 5), (1, 4)]
    model = SpeedModel.fit([(p, w, f(p, w)) for p, w in pairs], "sync", batch)
    assert model.theta == pytest.approx(theta, abs=1e-6)


def test_too_few_distinct_points_cannot_be_fitted():
    assert SpeedModel.fit([(1, 1, 1.0), (1, 1, 1.1), (1, 2, 2.0), (2, 2, 2.5)], "async") is None


def test_nnls_keeps_every_coefficient_non_negative():
    noisy = [(1, 1, 5.0), (1, 2, 1.0), (2, 2, 9.0), (2, 4, 0.5), (3, 5, 7.0)]
    assert all(t >= 0 for t in SpeedModel.fit(noisy, "async").theta)


def test_speed_points_average_repeated_shapes():
    records = [ShapeRecord(shape(1, 2), 1.0), ShapeRecord(shape(1, 2), 3.0)]
    assert speed_points(records) == [(1, 2, 2.0)]


def observation(current, window_speed, prior, t=700.0, since=0.0, budget=100.0, free=100.0):
    window = tuple(MetricSample(t - 60 * i, (), window_speed) for i in range(5, -1, -1))
    return Observation(
        "job", t, current, Resources(budget), Resources(free), window=window, prior=prior,
        shape_since_s=since,
    )  # fmt: skip


def profile(theta):
    pairs = [(1, 1), (1, 2), (2, 2), (2, 4), (3, 5), (1, 5), (4, 4)]
    return tuple(ShapeRecord(shape(p, w), async_speed(p, w, theta)) for p, w in pairs)


def test_adds_the_node_with_the_greater_predicted_gain():
    # θ with a heavy w/p term: at (1, 4) another PS gains more than another worker
    theta = (1.0, 2.0, 0.05, 0.05)
    obs = observation(shape(1, 4), async_speed(1, 4, theta), profile(theta))
    plan = OptimusPolicy().decide(obs)
    # f(2,4) = 4/(1+4+0.2+0.1) = 0.755 vs f(1,5) = 5/(1+10+0.25+0.05) = 0.442 (now 0.444)
    assert plan.action == Action.ADD_PS
    assert plan.shape.n_ps == 2 and plan.shape.ps[1].resources == NODE
    # with a light w/p term another worker wins
    theta = (5.0, 0.1, 0.05, 0.5)
    obs = observation(shape(1, 4), async_speed(1, 4, theta), profile(theta))
    assert OptimusPolicy().decide(obs).action == Action.ADD_WORKER


def test_one_node_per_ten_minutes_and_only_with_room_for_a_node():
    theta = (1.0, 2.0, 0.05, 0.05)
    early = observation(shape(1, 4), 0.44, profile(theta), t=500.0, since=0.0)
    assert OptimusPolicy().decide(early) is None  # 500 s < 600 s since the last change
    assert OptimusPolicy().decision_due_s(early) == 600.0
    full = observation(shape(1, 4), 0.44, profile(theta), free=4.0)
    assert OptimusPolicy().decide(full) is None  # 4 cpu free < one 5-cpu node


def test_without_a_fitted_model_it_explores_a_worker_then_a_ps():
    obs = observation(shape(1, 2), 1.0, ())
    assert OptimusPolicy().decide(obs).action == Action.ADD_WORKER
    known = (ShapeRecord(shape(1, 3), 1.2),)
    obs = observation(shape(1, 2), 1.0, known)
    assert OptimusPolicy().decide(obs).action == Action.ADD_PS


def test_launch_and_profiling_shapes():
    policy = OptimusPolicy()
    assert policy.initial_shape(Resources(100), Resources(100)) == shape(1, 2)  # 15 vCPU
    assert policy.initial_shape(Resources(100), Resources(14)) is None
    shapes = policy.prior_shapes(Resources(100))
    pairs = {(s.n_ps, s.n_workers) for s in shapes}
    assert len(pairs) == 20 and all(p + w <= 20 for p, w in pairs)  # 20 configs, 20 nodes max
    assert shapes == OptimusPolicy().prior_shapes(Resources(100))  # deterministic by seed
    with pytest.raises(UnknownNameError, match="optimus mode .*choose one of: async, sync"):
        OptimusPolicy(mode="fast")


# -- FA-BF -----------------------------------------------------------------------------
def test_fa_bf_searches_every_p_w_within_the_budget():
    shapes = FaBfPolicy().prior_shapes(Resources(20))  # 4 nodes of 5 vCPU
    assert sorted((s.n_ps, s.n_workers) for s in shapes) == [
        (1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (3, 1)]  # fmt: skip


def test_fa_bf_launches_the_fastest_shape_whole_and_keeps_it():
    prior = (
        ShapeRecord(shape(1, 3), 3.0),
        ShapeRecord(shape(2, 2), 3.5),
        ShapeRecord(shape(1, 1), 1.0),
        ShapeRecord(shape(3, 3), 9.0),
    )  # (3,3) > budget
    request = LaunchRequest("job", Resources(20), Resources(100), prior)
    plan = FaBfPolicy().launch_plan(request)
    assert plan.shape == shape(2, 2) and plan.action == Action.LAUNCH
    waiting = LaunchRequest("job", Resources(20), Resources(19), prior)
    assert FaBfPolicy().launch_plan(waiting) is None  # needs its whole 20 vCPU shape
    obs = Observation("job", 1e4, shape(2, 2), Resources(20), Resources(100))
    assert FaBfPolicy().decide(obs) is None


def test_fa_bf_without_measured_shapes_says_what_it_needs():
    with pytest.raises(SpecError, match="exhaustive search"):
        FaBfPolicy().launch_plan(LaunchRequest("job", Resources(20), Resources(100)))


def test_registry_knows_every_policy():
    assert {"nearchus", "nearchus+", "dlrover", "optimus", "fa-bf", "static"} <= set(policy_names())
    assert make_policy("optimus", interval_s=300).interval_s == 300


def test_a_prior_pair_by_index_is_the_listed_pair():
    """prior_shapes draws indices into ``[(p, n - p) for n in 2..N for p in 1..n-1]`` and makes
    only the chosen pairs (``_pair``): each index gives the listed pair, for every N."""
    from rightsize.scaling.optimus import _pair

    for total in range(2, 60):
        pairs = [(p, n - p) for n in range(2, total + 1) for p in range(1, n)]
        assert [_pair(i) for i in range(len(pairs))] == pairs
