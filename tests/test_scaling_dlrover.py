"""DLRover §4: eq. 10-11 against the paper's own tables, and each stage's decision by hand."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling import dlrover_math as dm
from rightsize.scaling.api import (
    Action,
    EventKind,
    LaunchRequest,
    MetricSample,
    NodeEvent,
    NodeMetrics,
    Observation,
    Plan,
    ShapeRecord,
)
from rightsize.scaling.dlrover import DLRoverPolicy

GI = 2**30
SHAPE_2CPU = ClusterShape.from_counts(1, 1, Resources(1, GI), Resources(1, GI))


@pytest.mark.parametrize(
    ("w_hat", "s_hat", "workers", "worker_cores", "n_ps", "s_total"),
    [
        (2.5, 5.7, 24, 3, 8, 128),  # Wide & Deep: Table 1 sample row -> Table 2 (24 x 3, 8 x 16)
        (19.4, 3.1, 8, 20, 2, 40),  # xDeepFM: Table 1 sample row -> Table 2 (8 x 20, 2 x 16)
    ],
)
def test_eq_10_11_reproduce_dlrover_table_2(w_hat, s_hat, workers, worker_cores, n_ps, s_total):
    # N_w = floor(200 / (w + s)), w = ceil(w_hat), s_total = 200 - N_w*w, N_ps = s_total // 16
    plan = dm.optimize(200, w_hat, s_hat, 16)
    assert (plan.n_workers, plan.worker_cores, plan.n_ps) == (workers, worker_cores, n_ps)
    assert plan.ps_total_cores == s_total


def test_rounded_up_workers_shrink_until_some_cpu_is_left_for_the_ps():
    # 100 / (6.1 + 0.05) = 16 workers of 7 cpu = 112 > 100: shrink to 14 (98, 2 left for the PS)
    plan = dm.optimize(100, 6.1, 0.05, 16)
    assert (plan.n_workers, plan.worker_cores, plan.n_ps, plan.ps_total_cores) == (14, 7, 1, 2)
    assert dm.optimize(1, 6.1, 0.05, 16) is None  # not even one worker fits


def test_hot_ps_formula():
    # s = min(s_hot / s_total * s_hat * N_w, C_max) = 16 / 85.1 * 5.7 * 24 = 25.72
    assert dm.hot_ps_cores(16, 85.1, 5.7, 24, 32) == pytest.approx(25.72, abs=0.01)
    assert dm.hot_ps_cores(16, 85.1, 5.7, 24, 24) == 24  # capped at C_max


def node(name, role, used, alloc, memory=0):
    return NodeMetrics(name, role, used, alloc, memory_used_bytes=memory)


def window_of(shape, used, seconds=60, steps=10.0, memory=0):
    """Samples every 10 s over ``seconds``, ``used`` cores per node in shape order."""
    return tuple(
        MetricSample(
            10.0 * (i + 1),
            tuple(
                node(n.name, n.role, u, n.resources.cpu_cores, memory)
                for n, u in zip(shape.nodes, used, strict=True)
            ),  # fmt: skip
            steps,
        )
        for i in range(seconds // 10)
    )


def observe(shape, window, plan_details, budget=200.0, free=500.0, **kw):
    plans = (Plan(shape, Action.LAUNCH, "launch", plan_details),)
    t = window[-1].time_s if window else 0.0
    return Observation(
        "job", t, shape, Resources(budget), Resources(free, 500 * GI), window=window,
        plans=plans, node_limit=Resources(32, 256 * GI), **kw,
    )  # fmt: skip


def test_sampling_launches_one_ps_and_one_worker_at_c_max_with_default_memory():
    plan = DLRoverPolicy().launch_plan(
        LaunchRequest("job", Resources(200), Resources(500, 500 * GI), (), Resources(20, 128 * GI))
    )
    assert plan.details["stage"] == "sample"
    # C_max = min(32, the 20-core server) and the 4 GiB default memory
    assert [(n.role, n.resources) for n in plan.shape.nodes] == [
        ("ps", Resources(20, 4 * GI)),
        ("worker", Resources(20, 4 * GI)),
    ]


def test_launch_from_the_fastest_similar_finished_job_scaled_into_the_budget():
    slow = ShapeRecord(ClusterShape.from_counts(1, 2, Resources(10), Resources(10)), 1.0)
    fast = ShapeRecord(ClusterShape.from_counts(2, 4, Resources(10), Resources(20)), 3.0)
    request = LaunchRequest("job", Resources(50), Resources(500), (slow, fast))
    plan = DLRoverPolicy().launch_plan(request)
    assert plan.details["stage"] == "adjust"
    # the fast job held 100 cpu, half of it fits: half its workers (2 of 20 cpu) stay, leaving
    # 2 x 10 PS + 40 = 60 cpu, then every node x 50/60: PS 8.333, workers 16.667
    assert plan.shape.total().cpu_cores == pytest.approx(50, abs=0.002)
    assert (plan.shape.n_ps, plan.shape.n_workers) == (2, 2)
    assert [n.resources.cpu_cores for n in plan.shape.nodes] == pytest.approx(
        [8.333, 8.333, 16.667, 16.667], abs=0.001
    )
    # a budget the shape fits in takes it as it is
    roomy = DLRoverPolicy().launch_plan(
        LaunchRequest("job", Resources(200), Resources(500), (fast,))
    )
    assert roomy.shape == fast.shape


def sample_shape():
    return ClusterShape.from_counts(1, 1, Resources(32, 4 * GI), Resources(32, 4 * GI))


def test_after_sampling_the_job_is_reshaped_by_eq_10_11():
    # W&D's sample row: w_hat 2.5, s_hat 5.7 of a 32-cpu PS (18%) -> 24 workers x 3, 8 PS x 16
    shape = sample_shape()
    obs = observe(shape, window_of(shape, (5.7, 2.5), memory=GI), {"stage": "sample"})
    plan = DLRoverPolicy().decide(obs)
    assert plan.action == Action.RESHAPE and plan.details["stage"] == "optimize"
    assert (plan.shape.n_ps, plan.shape.n_workers) == (8, 24)
    assert plan.shape.ps[0].resources.cpu_cores == 16
    # workers get the observed 1 GiB with the 20% margin
    assert plan.shape.workers[0].resources == Resources(3, int(1.2 * GI))
    assert plan.details["w_hat"] == 2.5 and plan.details["s_hat"] == 5.7


def test_saturated_ps_while_sampling_gets_more_cpu_and_samples_again():
    shape = ClusterShape.from_counts(1, 1, Resources(8, 4 * GI), Resources(32, 4 * GI))
    obs = observe(shape, window_of(shape, (7.6, 10)), {"stage": "sample"})  # PS at 95% > 90%
    plan = DLRoverPolicy().decide(obs)
    assert plan.details["stage"] == "sample"
    assert plan.shape.ps[0].resources.cpu_cores == 16  # doubled


def test_no_decision_before_sixty_seconds_or_a_hundred_steps():
    shape = sample_shape()
    short = observe(shape, window_of(shape, (5.7, 2.5), seconds=30, steps=1), {"stage": "sample"})
    assert DLRoverPolicy().decide(short) is None
    many_steps = observe(shape, window_of(shape, (5.7, 2.5), seconds=30, steps=5),
                         {"stage": "sample"})  # fmt: skip
    assert DLRoverPolicy().decide(many_steps) is not None  # 3 x 10 s x 5 = 150 steps > 100


def test_oom_worker_is_relaunched_with_double_memory_and_oom_ps_doubles_the_ps():
    shape = sample_shape()
    killed = (NodeEvent(5.0, "worker-0", EventKind.OOM_KILLED),)
    plan = DLRoverPolicy().decide(observe(shape, (), {"stage": "sample"}, events=killed))
    assert plan.action == Action.RELAUNCH_OOM
    assert plan.shape.workers[0].resources.memory_bytes == 8 * GI
    killed_ps = (NodeEvent(5.0, "ps-0", EventKind.OOM_KILLED),)
    plan = DLRoverPolicy().decide(observe(shape, (), {"stage": "sample"}, events=killed_ps))
    # twice the PS, each with 4 GiB, sharing the PS's 32 cpu
    assert [n.resources for n in plan.shape.ps] == [Resources(16, 4 * GI)] * 2


def test_hot_ps_is_replaced_with_the_formulas_cores():
    # PS use 15.5, 2, 2 of 16 each: ps-0 at 97% > 90% and > 1.5 x mean 6.5 -> hot
    # s = 15.5 / 19.5 * s_hat 0.5 * 24 workers = 9.54 < its 16 now -> no gain, no plan;
    # with s_hat 1.0: 19.08 cpu
    shape = ClusterShape.from_counts(3, 24, Resources(16), Resources(3))
    used = (15.5, 2, 2) + (2.9,) * 24
    obs = observe(shape, window_of(shape, used), {"stage": "adjust", "s_hat": 1.0}, budget=300)
    plan = DLRoverPolicy().decide(obs)
    assert plan.action == Action.REPLACE_PS
    # a new PS replaces the hot one (§4.2); the others stay as they were
    assert [n.name for n in plan.shape.ps] == ["ps-1", "ps-2", "ps-3"]
    assert plan.shape.node("ps-3").resources.cpu_cores == pytest.approx(19.077, abs=1e-3)
    in_place = DLRoverPolicy(replace_hot_ps=False).decide(obs)
    assert in_place.shape.node("ps-0").resources.cpu_cores == pytest.approx(19.077, abs=1e-3)


def test_a_hot_ps_of_a_job_that_never_sampled_gets_what_its_workers_full_speed_needs():
    # the job file's shape (no stage, no s_hat): ps-0 holds the dense layers and uses all of
    # its 0.2 cpu, ps-1 and ps-2 0.05 each; the workers wait on ps-0 and use half of their
    # 0.5. s_hat at their full speed = 0.295 / 2 workers * (1.0 / 0.5) = 0.295, so ps-0 needs
    # 0.195 / 0.295 * 0.295 * 2 = 0.39 cpu (its use, scaled by how far the workers idle).
    # Read as s_used / N_w (what the workers use now), the formula gave ps-0 its own 0.195:
    # never more than it had, so a hot PS of such a job was never replaced.
    shape = ClusterShape.from_counts(3, 2, Resources(0.2, GI), Resources(0.5, GI))
    window = window_of(shape, (0.195, 0.05, 0.05, 0.25, 0.25))
    obs = observe(shape, window, {}, budget=2.0, free=0.4)
    assert DLRoverPolicy().stage(obs) == "adjust"
    plan = DLRoverPolicy().decide(obs)
    assert plan.action == Action.REPLACE_PS
    assert [n.name for n in plan.shape.ps] == ["ps-1", "ps-2", "ps-3"]
    assert plan.shape.node("ps-3").resources.cpu_cores == pytest.approx(0.39)
    # workers that use all of their CPU are not held back: no more than ps-0 uses, no plan
    busy = window_of(shape, (0.195, 0.05, 0.05, 0.5, 0.5))
    assert DLRoverPolicy().replace_hot_ps(observe(shape, busy, {}, budget=2.0, free=0.4),
                                          dm.Usage.of(observe(shape, busy, {}))) is None


def test_a_hot_ps_gets_what_the_budget_has_room_for_when_the_formula_asks_more():
    # as above, but the workers use a quarter of their CPU: 0.195 * 4 = 0.78 cpu wanted,
    # and the 2-cpu budget leaves 0.4: ps-0's 0.2 + 0.4, less a millicore for rounding
    shape = ClusterShape.from_counts(3, 2, Resources(0.2, GI), Resources(0.5, GI))
    window = window_of(shape, (0.195, 0.05, 0.05, 0.125, 0.125))
    plan = DLRoverPolicy().decide(observe(shape, window, {}, budget=2.0, free=0.4))
    assert plan.action == Action.REPLACE_PS
    assert plan.shape.node("ps-3").resources.cpu_cores == pytest.approx(0.599)
    assert plan.shape.total().cpu_cores <= 2.0


def test_usage_is_read_while_the_job_trains_not_while_it_starts():
    # a launch sample (no steps yet: the servers load, the workers start on borrowed CPU)
    # and four training samples; the means are over the four
    shape = ClusterShape.from_counts(1, 1, Resources(0.2), Resources(0.5))
    starting = MetricSample(2.0, (node("ps-0", NodeRole.PS, 0.01, 0.2),
                                  node("worker-0", NodeRole.WORKER, 0.7, 0.5)), 0.0)  # fmt: skip
    training = window_of(shape, (0.2, 0.3), seconds=40)
    usage = dm.Usage.of(observe(shape, (starting, *training), {}))
    assert usage.cpu == pytest.approx({"ps-0": 0.2, "worker-0": 0.3})
    assert dm.Usage.of(observe(shape, (starting,), {})).cpu["ps-0"] == 0.01  # nothing trained


def test_usage_means_are_summed_sample_by_sample_and_computed_when_read():
    # each node's x / count added in sample order (the floats of the eager loop it replaced);
    # the memory only when read: a decision reads it only to size new workers
    shape = ClusterShape.from_counts(1, 2, Resources(1), Resources(1))
    window = tuple(
        MetricSample(10.0 * i, (node("ps-0", NodeRole.PS, 0.1 * i, 1, 7 * i),
                                node("worker-0", NodeRole.WORKER, 0.3, 1, 5),
                                node("worker-1", NodeRole.WORKER, 0.7 / i, 1, 5)), 1.0)
        for i in (1, 2, 3)
    )  # fmt: skip
    usage = dm.Usage.of(observe(shape, window, {}))
    ps_cpu = ps_memory = 0.0
    for i in (1, 2, 3):
        ps_cpu += 0.1 * i / 3
        ps_memory += 7 * i / 3
    assert "memory" not in vars(usage)
    assert usage.cpu["ps-0"] == ps_cpu and usage.memory["ps-0"] == ps_memory
    assert usage.role_used(NodeRole.WORKER) == usage.cpu["worker-0"] + usage.cpu["worker-1"]
    assert usage.worker_memory() == 5


def test_idle_ps_cpu_adds_workers_up_to_what_the_ps_can_serve():
    # PS use 4 of 16 (25% < 80%) with 4 workers: s_hat' = 1 per worker -> 16 workers;
    # each worker uses 2.5 -> 3 cpu; the budget leaves 40 - 28 = 12 -> 4 more workers
    shape = ClusterShape.from_counts(1, 4, Resources(16), Resources(3))
    obs = observe(shape, window_of(shape, (4, 2.5, 2.5, 2.5, 2.5)), {"stage": "adjust"}, budget=40)
    plan = DLRoverPolicy().decide(obs)
    assert plan.action == Action.ADD_WORKER
    assert plan.shape.n_workers == 8 and plan.shape.total().cpu_cores == 40


def test_a_small_budget_rounds_worker_cpu_to_tenths_not_whole_cores():
    # issue 17's wide-deep on a 2-cpu budget: one worker used 0.576 cores and the PS 0.177.
    # Whole cores (eq. 6) fit one worker and leave the PS half idle; tenths fit two.
    assert dm.optimize(2, 0.576, 0.177, 16) == dm.OptimizedPlan(1, 1, 1, 1)
    plan = dm.optimize(2, 0.576, 0.177, 16, core_step=0.1)
    assert (plan.n_workers, plan.worker_cores, plan.n_ps) == (2, 0.6, 1)
    assert plan.ps_total_cores == pytest.approx(0.8)
    # workers that would take all but a float's residue leave the PS a real share (found by
    # the invariant suite: 7.219 - 10 x 0.7219 = 8.9e-16 was a PS of "0 cpu")
    plan = dm.optimize(7.219, 0.5, 0.21, 16, core_step=0.7219)
    assert plan.n_workers == 9 and plan.ps_total_cores == pytest.approx(0.7219)
    policy = DLRoverPolicy()
    assert policy.core_step(Observation("j", 0, SHAPE_2CPU, Resources(2), Resources(2))) == 0.1
    assert policy.core_step(Observation("j", 0, SHAPE_2CPU, Resources(30), Resources(30))) == 1


@given(
    st.floats(0.001, 64), st.floats(0.001, 8), st.integers(1, 6), st.floats(0, 64),
    st.floats(0.0005, 8), st.floats(0.001, 32), st.floats(0, 40),
)  # fmt: skip
def test_no_room_for_a_worker_is_never_wrong(budget, node_cpu, workers, free, step, c_max, w_hat):
    """``no_room_for`` (read before ŵ, without making the headroom) says "no room" only where
    ``add_workers``' own test — the headroom's CPU over the rounded worker's — fits none."""
    shape = ClusterShape.from_counts(1, workers, Resources(node_cpu), Resources(node_cpu))
    obs = Observation("j", 0.0, shape, Resources(budget), Resources(free))
    worker = Resources(min(dm.rounded_up(w_hat, step), c_max)).cpu_cores
    if dm.no_room_for(obs, min(step, c_max)):
        assert int(obs.headroom.cpu_cores // worker) < 1


def test_no_room_for_reads_the_budget_left_and_the_free_cpu():
    shape = ClusterShape.from_counts(1, 2, Resources(1), Resources(1))  # 3 cpu in all
    assert dm.no_room_for(Observation("j", 0.0, shape, Resources(3.5), Resources(9)), 1)
    assert dm.no_room_for(Observation("j", 0.0, shape, Resources(9), Resources(0.5)), 1)
    assert not dm.no_room_for(Observation("j", 0.0, shape, Resources(4), Resources(1)), 1)
    # within the rounding margin of one worker: left to add_workers' own test
    assert not dm.no_room_for(Observation("j", 0.0, shape, Resources(3.999), Resources(9)), 1)
