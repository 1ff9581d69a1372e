import json

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling.api import (
    Action,
    MetricSample,
    NodeMetrics,
    Observation,
    Plan,
    coefficient_of_variation,
)
from rightsize.scaling.static import StaticPolicy, one_ps_two_workers

GI = 2**30


def sample(t: float, used: tuple[float, float, float], speed: float) -> MetricSample:
    names = [("ps-0", NodeRole.PS), ("worker-0", NodeRole.WORKER), ("worker-1", NodeRole.WORKER)]
    nodes = tuple(
        NodeMetrics(name, role, cpu_used_cores=u, cpu_allocated_cores=5.0)
        for (name, role), u in zip(names, used, strict=True)
    )
    return MetricSample(t, nodes, steps_per_s=speed)


def test_e_job_is_used_over_allocated():
    # NEARCHUS: e_job = sum(u_i) / sum(a_i) = (4.8 + 4.9 + 4.7) / 15 = 0.96
    s = sample(0, (4.8, 4.9, 4.7), 10)
    assert abs(s.e_job - 0.96) < 1e-9
    assert s.node("worker-1").cpu_efficiency == 4.7 / 5
    assert len(s.role(NodeRole.WORKER)) == 2


def test_headroom_is_budget_left_capped_by_cluster_free():
    shape = one_ps_two_workers(Resources(15, 15 * GI))
    obs = Observation("j", 0, shape, budget=Resources(100, 100 * GI), free=Resources(20, 200 * GI))
    assert obs.headroom == Resources(20, 85 * GI)


def test_mean_speed_and_cv():
    shape = one_ps_two_workers(Resources(15))
    window = tuple(sample(i, (1, 1, 1), speed) for i, speed in enumerate([10, 10, 10, 12, 14]))
    obs = Observation("j", 5, shape, Resources(100), Resources(100), window=window)
    assert obs.mean_speed() == 11.2 and obs.mean_speed(last=2) == 13
    assert coefficient_of_variation([10, 10, 10]) == 0
    assert abs(coefficient_of_variation([9, 11]) - 0.1) < 1e-12


def test_static_policy_keeps_its_shape_and_waits_for_room():
    shape = ClusterShape.from_counts(1, 2, Resources(2, GI), Resources(4, 2 * GI))
    policy = StaticPolicy(shape)
    assert policy.initial_shape(Resources(10, 10 * GI), Resources(10, 10 * GI)) == shape
    assert policy.initial_shape(Resources(10, 10 * GI), Resources(9, 10 * GI)) is None
    obs = Observation("j", 60, shape, Resources(10, 10 * GI), Resources(100, 100 * GI))
    assert policy.decide(obs) is None


def test_static_policy_without_a_shape_uses_the_whole_budget_one_third_to_the_ps():
    launched = StaticPolicy().initial_shape(Resources(30, 6 * GI), Resources(64, 64 * GI))
    assert [n.resources.cpu_cores for n in launched.nodes] == [10, 10, 10]
    assert launched.dt_config().r_wk == Resources(20, 4 * GI)


def test_policy_registry():
    import pytest

    from rightsize.core.errors import SpecError, UnknownNameError
    from rightsize.scaling.registry import make_policy, policy_names

    assert "static" in policy_names()
    assert isinstance(make_policy("static"), StaticPolicy)
    with pytest.raises(UnknownNameError, match="did you mean 'static'"):
        make_policy("statik")
    with pytest.raises(SpecError, match="policy static"):
        make_policy("static", r_up=0.5)


def test_additive_contract_defaults():
    # launch_plan wraps initial_shape; no prior shapes; a policy may be asked at any time
    from rightsize.scaling.api import Action, LaunchRequest

    policy = StaticPolicy()
    budget = Resources(30, 6 * GI)
    plan = policy.launch_plan(LaunchRequest("j", budget, Resources(64, 64 * GI)))
    assert plan.action == Action.LAUNCH and plan.shape == one_ps_two_workers(budget)
    assert policy.launch_plan(LaunchRequest("j", budget, Resources(29, 64 * GI))) is None
    assert policy.prior_shapes(budget) == ()
    obs = Observation("j", 60, plan.shape, budget, Resources(), plans=(plan,))
    assert (
        obs.last_plan is plan and Observation("j", 0, plan.shape, budget, budget).last_plan is None
    )
    assert super(StaticPolicy, policy).decision_due_s(obs) == 60


def test_an_oom_killed_node_is_relaunched_with_twice_its_memory():
    from rightsize.scaling.api import Action, EventKind, NodeEvent
    from rightsize.scaling.shapes import oom_killed_memory_doubled

    shape = one_ps_two_workers(Resources(3, 6 * GI))  # 2 GiB each
    budget = Resources(30, 60 * GI)
    quiet = Observation("j", 60, shape, budget, budget)
    assert oom_killed_memory_doubled(quiet) is None
    events = (NodeEvent(5.0, "worker-1", EventKind.OOM_KILLED),)
    plan = oom_killed_memory_doubled(Observation("j", 60, shape, budget, budget, events=events))
    assert plan.action == Action.RELAUNCH_OOM
    assert plan.shape.node("worker-1").resources == Resources(1, 4 * GI)  # 1 cpu kept
    assert plan.shape.node("worker-0").resources == Resources(1, 2 * GI)  # the others as they were


def test_a_plan_round_trips_through_json_and_refuses_an_unknown_action():
    shape = ClusterShape.from_counts(1, 2, Resources(1.5, 2 * GI), Resources(0.5, GI))
    plan = Plan(shape, Action.SCALE_UP, "grow", {"gain": 1.25, "why": "cpu"})
    back = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert back == plan
    assert back.shape.to_dict() == shape.to_dict()
    with pytest.raises(ValueError):
        Plan.from_json({**plan.to_json(), "action": "teleport"})
