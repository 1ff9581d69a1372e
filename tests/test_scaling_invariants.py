"""Invariants of every policy in the registry, on random observations (hypothesis): a plan never
asks for more than the budget, never grows by more than the cluster has free, keeps a PS and a
worker, never makes a node larger than the node limit — and so is never refused by the plan
check the runtime and the simulator share. The policies come from the registry, so a policy
added there is held to these rules without a change here."""

from hypothesis import given, settings
from hypothesis import strategies as st

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import MetricSample, NodeMetrics, Observation
from rightsize.scaling.plan_check import plan_problems
from rightsize.scaling.registry import make_policy, policy_names

SLACK = 0.01  # per-node millicore rounding


@st.composite
def observations(draw):
    n_ps, n_wk = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    ps_cores = draw(st.floats(0.5, 10))
    wk_cores = draw(st.floats(0.5, 16))
    shape = ClusterShape.from_counts(n_ps, n_wk, Resources(ps_cores), Resources(wk_cores))
    total = shape.total().cpu_cores
    budget = total + draw(st.floats(0, 100))
    free = draw(st.floats(0, 100))
    busy = st.one_of(st.floats(0.01, 1.0), st.just(0.99))  # 0.99: scale-ups happen too
    use = [draw(busy) for _ in shape.nodes]
    link = draw(st.floats(0, 1.0))
    speed = draw(st.floats(0.1, 10))
    window = tuple(
        MetricSample(
            60.0 * (i + 1),
            tuple(
                NodeMetrics(
                    n.name, n.role, u * n.resources.cpu_cores, n.resources.cpu_cores,
                    net_in_bytes_per_s=link * 100, net_capacity_bytes_per_s=100.0,
                    steps_per_s=speed,
                )
                for n, u in zip(shape.nodes, use, strict=True)
            ),
            speed,
        )
        for i in range(30)
    )  # fmt: skip
    limit = Resources(draw(st.sampled_from([20.0, 64.0])))
    return Observation(
        "job", 1800.0, shape, Resources(budget), Resources(free), window=window, node_limit=limit
    )


@settings(max_examples=90, deadline=None)  # six policies: about 15 draws each
@given(observations(), st.sampled_from(policy_names()))
def test_plans_stay_within_budget_free_and_node_limit(obs, name):
    plan = make_policy(name).decide(obs)
    if plan is None:
        return
    new, old = plan.shape.total().cpu_cores, obs.shape.total().cpu_cores
    slack = SLACK * len(plan.shape.nodes)
    assert plan.shape.ps and plan.shape.workers
    assert new <= max(obs.budget.cpu_cores, old) + slack
    assert new - old <= obs.free.cpu_cores + slack
    largest = max(n.resources.cpu_cores for n in plan.shape.nodes)
    assert (
        largest
        <= max(obs.node_limit.cpu_cores, *(n.resources.cpu_cores for n in obs.shape.nodes)) + SLACK
    )
    # (the observations' budgets and node limits hold their current shapes, so the shared
    # check's stricter rules — no node above the limit, no total above the budget — apply)
    held = obs.shape.total()
    assert plan_problems(plan.shape, obs.budget, held=held, free=obs.free,
                         node_limit=obs.node_limit) == []  # fmt: skip
