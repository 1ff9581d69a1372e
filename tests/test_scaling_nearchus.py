"""NEARCHUS §IV, decision by decision: hand-made observations -> the paper's rule, hand-computed."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rightsize.core.errors import ResourceError, SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling import nearchus_optimizer
from rightsize.scaling.api import (
    Action,
    MetricSample,
    NodeMetrics,
    Observation,
    Plan,
    ShapeRecord,
    metric_sample,
    node_columns,
)
from rightsize.scaling.nearchus import NearchusPolicy, psn_bottleneck
from rightsize.scaling.nearchus_rules import KEEP, Branch, first_proposal, inserted, replaced
from rightsize.scaling.nearchus_stability import stability_points, stable_window
from rightsize.scaling.registry import make_policy

LINK = 100.0  # bytes/s, so a net figure reads as a percentage


def shape_of(ps=(5.0,), workers=(5.0, 5.0)) -> ClusterShape:
    shape = ClusterShape.from_counts(len(ps), len(workers), Resources(1), Resources(1))
    for node, cores in zip(shape.nodes, (*ps, *workers), strict=True):
        shape = shape.with_resources(node.name, Resources(cores))
    return shape


def sample(t, shape, used, speed=10.0, net=None) -> MetricSample:
    """One metric sample: ``used`` cores per node (in shape order), ``net`` % per PS."""
    net = net or {}
    nodes = tuple(
        NodeMetrics(
            n.name, n.role, u, n.resources.cpu_cores,
            net_in_bytes_per_s=net.get(n.name, 0.0), net_out_bytes_per_s=net.get(n.name, 0.0),
            net_capacity_bytes_per_s=LINK,
        )
        for n, u in zip(shape.nodes, used, strict=True)
    )  # fmt: skip
    return MetricSample(t, nodes, speed)


def steady(shape, used, minutes=5, speed=10.0, net=None, start=60.0):
    """One sample a minute for ``minutes`` minutes, all alike (so CV = 0)."""
    return tuple(sample(start + 60 * i, shape, used, speed, net) for i in range(minutes))


def observe(shape, window, budget=100.0, free=100.0, **kw) -> Observation:
    t = window[-1].time_s if window else 0.0
    return Observation("job", t, shape, Resources(budget), Resources(free), window=window, **kw)


def cores(shape: ClusterShape) -> list[float]:
    return [n.resources.cpu_cores for n in shape.nodes]


# -- launch ---------------------------------------------------------------------------
def test_launch_is_r0_of_the_budget_as_one_ps_and_two_workers():
    # R0 = 15% of 100 -> (1, 2, R0/3, 2R0/3) = 5 cpu each
    launched = NearchusPolicy().initial_shape(Resources(100), Resources(100))
    assert cores(launched) == [5, 5, 5]
    assert NearchusPolicy().initial_shape(Resources(100), Resources(14.9)) is None  # waits
    assert cores(NearchusPolicy(r0=0.3).initial_shape(Resources(100), Resources(100))) == [10] * 3


def test_launch_min_cores_starts_small_budgets_like_optimus():
    # §V-A: both start at 15 vCPU; R0 of a 30-vCPU budget would be 4.5 -> 15 (5 each)
    policy = NearchusPolicy(launch_min_cores=15)
    assert cores(policy.initial_shape(Resources(30), Resources(100))) == [5, 5, 5]
    assert cores(policy.initial_shape(Resources(200), Resources(200))) == [10, 10, 10]  # R0 30
    assert cores(policy.initial_shape(Resources(12), Resources(100))) == [4, 4, 4]  # budget


def test_budget_below_the_minimal_shape_is_a_user_error():
    # R0 (15%) of 1.5 cpu as three nodes of at least 0.1 cpu needs 2 cpu
    with pytest.raises(ResourceError, match="at least 2 cpu"):
        NearchusPolicy().initial_shape(Resources(1.5), Resources(100))


# -- stability detector ----------------------------------------------------------------
def test_stability_needs_five_points_with_cv_below_five_percent():
    shape = shape_of()
    params = NearchusPolicy().params
    assert stable_window(steady(shape, (1, 5, 5), minutes=4), params) is None  # 4 points
    assert stable_window(steady(shape, (1, 5, 5)), params) is not None
    # speed 10,10,10,10,13: mean 10.6, std 1.2 -> CV 11% > 5%
    window = steady(shape, (1, 5, 5), 4) + (sample(300, shape, (1, 5, 5), speed=13),)
    assert stable_window(window, params) is None
    # speed 10,10,10,10,10.5: CV = 0.2/10.1 = 2% < 5%
    window = steady(shape, (1, 5, 5), 4) + (sample(300, shape, (1, 5, 5), speed=10.5),)
    assert stable_window(window, params) is not None


def test_stability_points_average_each_minute_and_must_be_consecutive():
    shape = shape_of()
    window = tuple(sample(10 * i, shape, (1, 5, 5)) for i in range(1, 13))  # 10..120 s
    points = stability_points(window, 60)
    assert [len(p) for p in points] == [6, 6]  # (0, 60], (60, 120]
    gap = (sample(0, shape, (1, 5, 5)), sample(200, shape, (1, 5, 5)))
    assert len(stability_points(gap, 60)) == 1  # the 0 s sample is not consecutive


def test_no_decision_before_the_window_is_stable():
    shape = shape_of()
    policy = NearchusPolicy()
    window = steady(shape, (5, 5, 5), minutes=3)
    assert policy.decide(observe(shape, window)) is None
    # three points taken from 60 s: five can exist at 60 + 4*60 = 300 s
    assert policy.decision_due_s(observe(shape, window)) == 300


# -- scaling engine ------------------------------------------------------------------
def test_e_job_096_scales_up_by_half_in_proportion():
    # e_job = (4.8 + 4.8 + 4.8) / 15 = 0.96 >= 0.95 -> +50% = +7.5 cpu, 2.5 to each node
    shape = shape_of()
    plan = NearchusPolicy().decide(observe(shape, steady(shape, (4.8, 4.8, 4.8))))
    assert plan.action == Action.SCALE_UP
    assert cores(plan.shape) == [7.5, 7.5, 7.5]
    assert plan.details["e_job"] == pytest.approx(0.96)


def test_scale_up_is_proportional_to_what_each_node_holds():
    shape = shape_of(ps=(2,), workers=(4, 6))  # 12 cpu, +50% = +6: ps +1, workers +2, +3
    plan = NearchusPolicy().decide(observe(shape, steady(shape, (1.95, 3.9, 5.9))))
    assert cores(plan.shape) == [3, 6, 9]


@pytest.mark.parametrize(
    ("budget", "free", "limit", "expected"),
    [
        (20, 100, None, [20 / 3] * 3),  # budget left 5 -> +33%
        (100, 3, None, [6, 6, 6]),  # the cluster has 3 free -> +20%
        (100, 100, 6, [6, 6, 6]),  # a 6-cpu node limit -> +20%
    ],
)
def test_scale_up_is_capped_by_budget_cluster_and_node_limit(budget, free, limit, expected):
    shape = shape_of()
    node_limit = Resources(limit) if limit else None
    obs = observe(shape, steady(shape, (5, 5, 5)), budget, free, node_limit=node_limit)
    plan = NearchusPolicy().decide(obs)
    assert plan.action == Action.SCALE_UP
    assert cores(plan.shape) == pytest.approx(expected, abs=2e-3)


def test_at_the_budget_an_efficient_job_keeps_its_shape_and_waits_for_room():
    shape = shape_of()
    obs = observe(shape, steady(shape, (5, 5, 5)), budget=15)
    policy = NearchusPolicy()
    assert policy.decide(obs) is None
    assert policy.decision_due_s(obs) == math.inf  # nothing until the cluster changes


def net_window(shape, hot_samples, total=30):
    """``total`` samples 10 s apart; the first ``hot_samples`` have the PS link at 95%."""
    return tuple(
        sample(10 * (i + 1), shape, (5, 4, 4), net={"ps-0": 95 if i < hot_samples else 50})
        for i in range(total)
    )


def test_psn_four_of_thirty_samples_above_ninety_percent_adds_a_ps():
    # 4/30 = 13% > 10% of samples above 90% of the link -> PSN on ps-0
    shape = shape_of()
    window = net_window(shape, hot_samples=4)
    assert psn_bottleneck(window, NearchusPolicy().params) == "ps-0"
    plan = NearchusPolicy().decide(observe(shape, window))
    assert plan.action == Action.ADD_PS
    # r_ps = 5 re-divided evenly over 2 PS; workers unchanged
    assert cores(plan.shape) == [2.5, 5, 5, 2.5]
    assert plan.shape.n_ps == 2


def test_three_of_thirty_is_not_psn_so_it_is_an_mu_bottleneck_add_a_worker():
    # 3/30 = 10% is not *more* than 10% -> MU bottleneck: a worker, r_wk / n_wk = 10 / 3
    shape = shape_of()
    window = net_window(shape, hot_samples=3)
    assert psn_bottleneck(window, NearchusPolicy().params) is None
    plan = NearchusPolicy().decide(observe(shape, window))
    assert plan.action == Action.ADD_WORKER
    assert cores(plan.shape) == pytest.approx([5, 10 / 3, 10 / 3, 10 / 3], abs=1e-3)


def test_only_the_last_thirty_network_samples_count():
    shape = shape_of()
    # 10 old hot samples, then 30 cool ones: the hot ones are older than N_net
    window = net_window(shape, hot_samples=10, total=40)
    window = window[:10] + tuple(
        sample(10 * (i + 11), shape, (5, 4, 4), net={"ps-0": 50}) for i in range(30)
    )
    assert psn_bottleneck(window, NearchusPolicy().params) is None


# -- resource optimizer ----------------------------------------------------------------
def test_component_level_moves_idle_ps_cpu_to_the_workers():
    # e_ps = 0.5/5 = 0.1 < 0.8 <= e_wk = 4.75/5; idle PS cpu 4.5, 90% of it (4.05) moves:
    # PS 5 - 4.05 = 0.95, each worker 5 + 2.025 = 7.025
    shape = shape_of()
    plan = NearchusPolicy().decide(observe(shape, steady(shape, (0.5, 4.75, 4.75))))
    assert plan.action == Action.REBALANCE
    assert cores(plan.shape) == pytest.approx([0.95, 7.025, 7.025], abs=1e-3)
    assert plan.shape.total().cpu_cores == pytest.approx(15)
    # all of it, the literal reading: PS 0.5, workers 7.25
    literal = NearchusPolicy(reclaim_fraction=1.0)
    plan = literal.decide(observe(shape, steady(shape, (0.5, 4.75, 4.75))))
    assert cores(plan.shape) == [0.5, 7.25, 7.25]


def test_node_level_rebalances_within_a_component_in_proportion_to_use():
    # two PS of 4 cpu using 4 and 1: total 8, 0.1 floor each, 7.8 split 4:1 -> 6.34, 1.66
    shape = shape_of(ps=(4, 4), workers=(10,))
    used = {"ps-0": 4.0, "ps-1": 1.0, "worker-0": 10.0}
    balanced = nearchus_optimizer.node_level(shape, used, 0.8, 0.1)
    assert cores(balanced) == pytest.approx([6.34, 1.66, 10])
    # components: e_ps = 5/8 < 0.8 <= e_wk = 1 -> the PS give their idle 3 to the worker
    moved = nearchus_optimizer.component_level(balanced, used, 0.8, 1.0, 0.1)
    assert sum(cores(moved)[:2]) == pytest.approx(5) and cores(moved)[2] == pytest.approx(13)


def test_no_component_move_when_both_or_neither_are_below_threshold():
    shape = shape_of()
    both_low = {"ps-0": 1.0, "worker-0": 2.0, "worker-1": 2.0}
    assert nearchus_optimizer.component_level(shape, both_low, 0.8, 1.0, 0.1) == shape
    both_high = {"ps-0": 4.5, "worker-0": 4.5, "worker-1": 4.5}
    assert nearchus_optimizer.optimize(shape, both_high, 0.8) is None


def test_component_move_stops_at_the_node_limit():
    shape = shape_of()
    used = {"ps-0": 0.5, "worker-0": 4.75, "worker-1": 4.75}
    moved = nearchus_optimizer.component_level(shape, used, 0.8, 1.0, 0.1, limit_cores=6)
    assert cores(moved) == [3, 6, 6]  # the workers could only take 1 cpu each


# -- stop rule -------------------------------------------------------------------------
def plans_and_history(speeds):
    """launch + two add-worker moves; ``speeds`` of the two shapes before the current one."""
    a, b, c = shape_of(), shape_of(workers=(5, 5, 5)), shape_of(workers=(4, 4, 4, 4))
    plans = (
        Plan(a, Action.LAUNCH, "launch"),
        Plan(b, Action.ADD_WORKER, "mu"),
        Plan(c, Action.ADD_WORKER, "mu"),
    )
    history = (ShapeRecord(a, speeds[0]), ShapeRecord(b, speeds[1]))
    return c, plans, history


def test_two_scale_outs_in_a_row_without_a_two_percent_gain_stop_the_search():
    # speed before the two moves 10.0; now 10.1 < 10.0 * 1.02 -> converged, keep the shape
    shape, plans, history = plans_and_history((10.0, 10.05))
    window = steady(shape, (5, 3.5, 3.5, 3.5, 3.5), speed=10.1)  # e_job 0.90: add a worker
    obs = observe(shape, window, plans=plans, history=history)
    policy = NearchusPolicy()
    assert policy.decide(obs) is None
    assert policy.decision_due_s(obs) == math.inf
    # 10.3 >= 10.2: the moves paid off, the engine goes on
    faster = observe(shape, steady(shape, (5, 3.5, 3.5, 3.5, 3.5), speed=10.3), plans=plans,
                     history=history)  # fmt: skip
    assert policy.decide(faster).action == Action.ADD_WORKER


def test_rebalances_neither_count_toward_the_stop_nor_break_the_run():
    a, b, c = shape_of(), shape_of(ps=(4,), workers=(6, 5)), shape_of(workers=(5, 5, 5))
    d = shape_of(workers=(4, 4, 4, 4))
    steady_d = steady(d, (5, 3.5, 3.5, 3.5, 3.5), speed=10.3)  # e_job 0.9
    # launch a (10.0), rebalanced to b (10.1), then two add-worker moves: the speed to
    # beat is the best of a and b, 10.1, and 10.3 < 10.1 * 1.02 = 10.302 -> converged
    # (against a alone, 10.3 >= 10.2 would go on)
    plans = (Plan(a, Action.LAUNCH, "launch"), Plan(b, Action.REBALANCE, "opt"),
             Plan(c, Action.ADD_WORKER, "mu"), Plan(d, Action.ADD_WORKER, "mu"))  # fmt: skip
    history = (ShapeRecord(a, 10.0), ShapeRecord(b, 10.1), ShapeRecord(c, 10.2))
    assert NearchusPolicy().decide(observe(d, steady_d, plans=plans, history=history)) is None
    # a scale-out and a rebalance are not two scale-outs: the engine goes on (the old rule,
    # counting rebalances, stopped here: 10.3 < 10.3 * 1.02)
    two = (Plan(a, Action.LAUNCH, "launch"), Plan(c, Action.ADD_WORKER, "mu"),
           Plan(d, Action.REBALANCE, "opt"))  # fmt: skip
    history = (ShapeRecord(a, 10.3), ShapeRecord(c, 10.3))
    assert NearchusPolicy().decide(observe(d, steady_d, plans=two, history=history)) is not None


def test_parameters_are_named_validated_and_overridable_by_the_registry():
    assert make_policy("nearchus", r_up=0.3).params.r_up == 0.3
    with pytest.raises(SpecError, match="r0"):
        NearchusPolicy(r0=1.5)
    with pytest.raises(SpecError, match="policy nearchus: unexpected parameter 'r_upp'"):
        make_policy("nearchus", r_upp=0.3)
    defaults = NearchusPolicy().params
    assert (defaults.e_thd_job, defaults.r_up, defaults.n_comp, defaults.cv_max) == (
        0.95, 0.5, 5, 0.05)  # fmt: skip
    assert (defaults.n_net, defaults.psn_sample_fraction, defaults.psn_link_utilization) == (
        30, 0.10, 0.90)  # fmt: skip
    assert defaults.e_thd_opt == 0.8


# -- one sample form: nodes kept as columns, whichever mechanism made them -------------------
def as_the_simulator_makes_it(s: MetricSample) -> MetricSample:
    """The same sample made as the simulator makes its own: columns given straight to
    ``metric_sample``, no NodeMetrics made."""
    c = s.nodes
    columns = node_columns(c.names, c.roles, c.cpu_used_cores, c.cpu_allocated_cores,
                           c.memory_used_bytes, c.memory_allocated_bytes, c.net_in_bytes_per_s,
                           c.net_out_bytes_per_s, c.net_capacity_bytes_per_s, c.steps_per_s)  # fmt: skip
    return metric_sample(s.time_s, columns, s.steps_per_s, s.samples_per_s)


@given(st.lists(st.tuples(st.sampled_from(["ps-0", "worker-0", "worker-1"]),
                          st.floats(0, 1e9), st.floats(0, 1e9),
                          st.sampled_from([None, 0.0, 1e8, 1.25e9])), max_size=5))
def test_one_nodes_link_utilization_is_the_columns_value_for_its_first_node(nodes):
    columns = node_columns(
        tuple(n for n, *_ in nodes), tuple(NodeRole.PS for _ in nodes), (0.0,) * len(nodes),
        (1.0,) * len(nodes), (0,) * len(nodes), (0,) * len(nodes),
        tuple(i for _, i, _, _ in nodes), tuple(o for _, _, o, _ in nodes),
        tuple(c for *_, c in nodes), (0.0,) * len(nodes))  # fmt: skip
    first = {}
    for name, utilization in zip(columns.names, columns.net_utilization, strict=True):
        first.setdefault(name, utilization)
    for name in ("ps-0", "worker-0", "worker-1"):
        assert columns.net_utilization_of(name) == first.get(name)


def test_columns_view_the_nodes_and_feed_the_sums():
    shape = shape_of()
    s = sample(60.0, shape, [2.0, 4.5, 5.0], net={"ps-0": 95.0})
    assert s.nodes.names == ("ps-0", "worker-0", "worker-1")
    assert s.nodes.cpu_used_cores == (2.0, 4.5, 5.0)
    assert s.nodes.net_utilization == (0.95, 0.0, 0.0)
    assert s.nodes.net_utilization_of("ps-0") == 0.95
    assert s.nodes.net_utilization_of("ps-9") is None
    assert s.cpu_used_cores == 11.5 and s.cpu_allocated_cores == 15.0
    lean = as_the_simulator_makes_it(s)
    assert lean == s and repr(lean) == repr(s) and lean.__dict__ == s.__dict__
    assert lean.e_job == s.e_job == 11.5 / 15
    # The nodes come back as the NodeMetrics they were made of, one at a time.
    ps = NodeMetrics("ps-0", NodeRole.PS, 2.0, 5.0, 0, 0, 95.0, 95.0, LINK, 0.0)
    assert s.nodes[0] == ps and s.node("ps-0") == ps and s.role(NodeRole.PS) == (ps,)
    assert MetricSample(60.0, tuple(s.nodes), 10.0) == s and len(s.nodes) == 3


def test_nearchus_decides_the_same_on_samples_made_either_way():
    shape = shape_of(ps=(5.0, 5.0), workers=(5.0, 5.0))
    hot = {"ps-0": 95.0, "ps-1": 40.0}  # PSN on ps-0 in every sample
    for window, action in (
        (steady(shape, [2.0, 1.0, 4.8, 4.9], net=hot), Action.ADD_PS),  # e_job 0.635, PSN
        (steady(shape, [4.9, 4.8, 4.9, 4.9]), Action.SCALE_UP),  # e_job 0.975
        (steady(shape, [1.0, 1.0, 4.9, 4.9]), Action.REBALANCE),  # idle PS, no PSN
    ):
        lean = tuple(map(as_the_simulator_makes_it, window))
        params = NearchusPolicy().params
        full, thin = stable_window(window, params), stable_window(lean, params)
        assert (thin.e_job, thin.speed, thin.used) == (full.e_job, full.speed, full.used)
        assert psn_bottleneck(lean, params) == psn_bottleneck(window, params)
        plan = NearchusPolicy().decide(observe(shape, lean))
        assert plan == NearchusPolicy().decide(observe(shape, window))
        assert plan.action == action


# -- the clock (scaling.pace) and small jobs ----------------------------------------------
def test_policies_count_their_own_durations_in_metric_intervals():
    assert NearchusPolicy().params.stability_period_s == 60  # the papers' minute
    assert make_policy("nearchus", 2.0).params.stability_period_s == 2.0
    assert make_policy("nearchus+", 2.0).params.stability_period_s == 2.0
    assert make_policy("optimus", 2.0).interval_s == 20.0  # §V's ten intervals
    assert make_policy("optimus").interval_s == 600.0
    # a duration the user gives is kept; a policy without durations ignores the clock
    assert make_policy("nearchus", 2.0, stability_period_s=7).params.stability_period_s == 7
    assert make_policy("static", 2.0).name == "static"


def test_a_job_that_trains_nothing_is_never_stable():
    shape = shape_of()
    launching = steady(shape, (0.1, 5, 5), speed=0.0)  # constant: CV 0, but no steps at all
    assert NearchusPolicy().decide(observe(shape, launching)) is None


def test_a_small_budget_moves_less_than_half_a_core():
    # 0.5 cpu on a 2-cpu budget, the PS saturated, workers half idle: the Resource Optimizer
    # moves 90% of their idle 0.2 cpu (more than 2.5% of the budget, less than half a core)
    shape = shape_of(ps=(0.1,), workers=(0.2, 0.2))
    window = steady(shape, (0.1, 0.1, 0.1))
    plan = NearchusPolicy().decide(observe(shape, window, budget=2.0, free=2.0))
    assert plan.action == Action.REBALANCE
    assert plan.shape.node("ps-0").resources.cpu_cores == pytest.approx(0.28)
    at_scale = NearchusPolicy().decide(observe(shape, window, budget=100.0))
    assert at_scale.action == Action.ADD_WORKER  # the same move is too small for half a core


def test_rules_are_walked_in_order_and_keep_ends_the_walk():
    shape = shape_of()
    plan = Plan(shape, Action.RESHAPE, "a")

    class Answer:
        def __init__(self, name, answer, branch=None):
            self.name, self.answer, self.branch, self.asked = name, answer, branch, 0

        def propose(self, obs, stable):
            self.asked += 1
            return self.answer

    window = steady(shape, (1.0, 5.0, 5.0), speed=1.0)
    stable = NearchusPolicy().stable(observe(shape, window))
    obs = observe(shape, window)
    rules = (Answer("a", None), Answer("b", KEEP), Answer("c", plan))
    assert first_proposal(rules, obs, stable, None) is None and rules[2].asked == 0
    rules = replaced(rules, "b", Answer("b2", None))
    assert [r.name for r in rules] == ["a", "b2", "c"]
    assert first_proposal(rules, obs, stable, None) is plan
    rules = inserted(rules, Answer("up", plan, Branch.SCALE_UP), after="a")
    assert [r.name for r in rules] == ["a", "up", "b2", "c"]
    assert stable.e_job < 0.95  # the engine's test skips the scale-up side's rule
    assert first_proposal(rules, obs, stable, 0.95) is plan and rules[1].asked == 0
    assert first_proposal(rules, obs, stable, None) is plan and rules[1].asked == 1
    with pytest.raises(KeyError):
        replaced(rules, "nope", Answer("x", None))
