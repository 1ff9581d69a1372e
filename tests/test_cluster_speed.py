"""The simulator's fast paths give exactly what the plain code would (issue 5: speed without
changing any result)."""

import dataclasses
import gc

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import nnls

from rightsize.cluster.clusters import CLUSTERS
from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import JobModel
from rightsize.cluster.models import sim_model
from rightsize.cluster.simjob import (
    Noise,
    SimJob,
    measured,
    measured_row,
    sample_template,
)
from rightsize.cluster.simulator import Simulator, _Run, cyclic_gc_paused
from rightsize.cluster.traces import nearchus_trace
from rightsize.core.resources import Resources, sum_resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.core.spec import Strategy
from rightsize.scaling import dlrover_math as dm
from rightsize.scaling.api import (
    MetricSample,
    NodeColumns,
    NodeMetrics,
    Observation,
    ShapeRecord,
    metric_sample,
    node_columns,
)
from rightsize.scaling.nearchus_stability import stability_points
from rightsize.scaling.optimus import (
    KnownSpeeds,
    OptimusPolicy,
    SpeedModel,
    feature_row,
    group_speeds,
    speed_points,
)
from rightsize.scaling.registry import make_policy, policy_names
from rightsize.scaling.shapes import (
    one_ps_two_workers,
    redistributed,
    scaled_out,
    scaled_up,
    with_node,
)

SHAPE = ClusterShape.from_counts(1, 3, Resources(2.5, 10), Resources(4.25, 20))


def test_fast_metric_objects_equal_the_normally_built_ones():
    plain = NodeMetrics("ps-0", NodeRole.PS, 1.25, 2.0, 5, 8, 40.0, 40.0, 100.0, 1.5)
    columns = node_columns(("ps-0",), (NodeRole.PS,), (1.25,), (2.0,), (5,), (8,), (40.0,),
                           (40.0,), (100.0,), (1.5,))  # fmt: skip
    assert columns == NodeColumns.of((plain,)) and columns.net_utilization == (0.4,)
    assert tuple(columns) == (plain,) and columns[0].cpu_efficiency == 0.625
    sample = metric_sample(60.0, columns, 2.0, 64.0)
    made = MetricSample(60.0, (plain,), 2.0, 64.0)
    assert sample == made and sample.__dict__ == made.__dict__ and repr(sample) == repr(made)
    assert sample.e_job == 0.625


def test_shape_totals_are_remembered_but_equal_to_a_fresh_sum():
    assert SHAPE.total() is SHAPE.total()
    assert SHAPE.total() == Resources(15.25, 70)
    assert SHAPE.role_total(NodeRole.WORKER) == Resources(12.75, 60)
    assert (SHAPE.n_ps, SHAPE.n_workers) == (1, 3)
    assert [n.name for n in SHAPE.workers] == ["worker-0", "worker-1", "worker-2"]
    grown = SHAPE.with_node_added(NodeRole.PS, Resources(1))  # a new shape, its own totals
    assert grown.total() == Resources(16.25, 70) and grown.n_ps == 2
    assert ClusterShape().total() == Resources() and ClusterShape().role(NodeRole.PS) == ()
    # The cache is not part of the value: equality, hashing and to_dict ignore it.
    fresh = ClusterShape.from_dict(SHAPE.to_dict())
    assert fresh == SHAPE and hash(fresh) == hash(SHAPE) == hash((SHAPE.nodes,))
    assert fresh.to_dict() == SHAPE.to_dict()


@given(st.lists(st.floats(0, 50, allow_nan=False), max_size=8))
def test_sum_resources_rounds_after_every_addition_like_repeated_add(cpus):
    items = [Resources(c, int(c * 1000), 1) for c in cpus]
    total = Resources()
    for item in items:
        total = total + item
    assert sum_resources(items) == total


def test_speed_points_from_a_grouped_prior_equal_the_ungrouped_ones():
    two = ClusterShape.from_counts(1, 2, Resources(5), Resources(5))
    three = ClusterShape.from_counts(1, 3, Resources(5), Resources(5))
    prior = (ShapeRecord(two, 1.0), ShapeRecord(three, 1.4))
    later = [ShapeRecord(two, 1.2), ShapeRecord(three, 1.5)]
    known = group_speeds(prior)
    assert speed_points(later, known) == speed_points([*prior, *later])
    assert speed_points(later, known)[0] == (1, 2, 1.1)
    assert known == {(1, 2): [1.0], (1, 3): [1.4]}  # left unchanged
    # KnownSpeeds (what Optimus keeps per prior) fits the same model as the points, new
    # (p, w) or not (a prior of five shapes: enough distinct points for either mode's fit)
    four = ClusterShape.from_counts(2, 2, Resources(5), Resources(5))
    wide = (ShapeRecord(ClusterShape.from_counts(2, 3, Resources(5), Resources(5)), 1.6),
            ShapeRecord(ClusterShape.from_counts(3, 4, Resources(5), Resources(5)), 2.1),
            ShapeRecord(ClusterShape.from_counts(2, 5, Resources(5), Resources(5)), 2.3))
    remembered, known = KnownSpeeds.of([*prior, *wide]), group_speeds([*prior, *wide])
    for records in (later, [ShapeRecord(four, 0.9), *later], [ShapeRecord(four, 0.9)], []):
        for mode in ("async", "sync"):
            kept = remembered.model(records, mode, 64.0)
            assert kept is not None
            assert kept == SpeedModel.fit(speed_points(records, known), mode, 64.0)
            assert kept == SpeedModel.fit(speed_points([*prior, *wide, *records]), mode, 64.0)


SPEEDS = st.floats(-1, 5) | st.just(float("nan"))


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), SPEEDS), max_size=6),
    st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4), SPEEDS), max_size=4),
    st.sampled_from(["async", "sync"]),
)  # fmt: skip
def test_optimus_fit_from_kept_prior_means_equals_the_fit_of_all_points(prior, later, mode):
    """``KnownSpeeds.model`` (what Optimus fits at every decision, keeping the prior's usable
    means) is ``SpeedModel.fit`` of every point: the same theta, or ``None`` for both — a
    record at or below 0 steps/s, or NaN, drops its (p, w) even where the prior had a mean."""
    def record(p, w, speed):
        shape = ClusterShape.from_counts(p, w, Resources(5), Resources(5))
        return ShapeRecord(shape, speed)

    prior_records = [record(*point) for point in prior]
    records = [record(*point) for point in later]
    kept = KnownSpeeds.of(prior_records).model(records, mode, 64.0)
    fitted = SpeedModel.fit(speed_points([*prior_records, *records]), mode, 64.0)
    assert kept == fitted


@given(
    st.lists(st.lists(st.floats(0, 8), min_size=4, max_size=4), min_size=1, max_size=6),
    st.booleans(),
)
def test_dlrover_usage_down_the_columns_equals_the_sample_by_sample_sums(used, one_node_left):
    """``dlrover_math.Usage`` sums each node's column in one pass when every sample has the
    shape's nodes, and sample by sample otherwise (a node gone mid-window): the same floats
    as each node's ``used / count`` added in sample order, and each role's ``sum``."""
    shape = ClusterShape.from_counts(1, 3, Resources(8), Resources(8))
    nodes = shape.nodes
    window = tuple(
        MetricSample(10.0 * (i + 1), tuple(
            NodeMetrics(n.name, n.role, u, 8.0) for n, u in zip(nodes, row, strict=True)
            if not (one_node_left and i == 0 and n.name == "worker-2")), 1.0)
        for i, row in enumerate(used)
    )  # fmt: skip
    usage = dm.Usage.of(Observation(job="j", time_s=100.0, shape=shape, budget=Resources(32),
                                    free=Resources(0), window=window))  # fmt: skip
    cpu: dict[str, float] = {}
    for sample in window:
        for node in sample.nodes:
            cpu[node.name] = cpu.get(node.name, 0.0) + node.cpu_used_cores / len(window)
    assert usage.cpu == cpu and list(usage.cpu) == list(cpu)
    for role in (NodeRole.PS, NodeRole.WORKER):
        assert usage.role_used(role) == sum(cpu.get(n.name, 0.0) for n in shape.role(role))


def test_simulated_samples_are_the_ones_the_runtime_makes_of_its_node_metrics():
    """``SimJob._samples`` makes each sample from a row of measurements as the runtime makes
    its own: equal, field by field and bit for bit, to ``MetricSample`` built from the
    NodeMetrics of those measurements (warm-up and steady noise alike, a link or none)."""
    spec = nearchus_trace(1, 1).jobs[0]
    model = JobModel(sim_model(spec.model), CLUSTERS["B"])
    shape = ClusterShape.from_counts(1, 3, Resources(2.5), Resources(4.25))  # no OOM kill
    perf, noise = model.evaluate(shape), Noise()
    times = [30.0, 90.0, 150.0, 210.0]  # the first two in the 60-s warm-up after 0 s
    for link in (0.0, 1e9):
        job = SimJob(spec, model, 1e9, np.random.default_rng(11))
        job.perf, job.started_s, job.ready_s = perf, 10.0, 0.0
        job.observed_link_bytes_per_s = link
        rng = np.random.default_rng(11)
        samples = job._samples(times, noise)
        plain = plain_samples(job, times, rng.standard_normal((4, 2 * len(shape.nodes) + 1)).tolist(), noise)
        assert not any("nodes" in s.__dict__ for s in samples)  # made when first read
        assert samples[1].nodes == plain[1].nodes  # (now read)
        assert [("nodes" in s.__dict__) for s in samples] == [False, True, False, False]
        assert [s.nodes for s in samples] == [s.nodes for s in plain]
        # its policy read nodes: the job's next collection is measured at once, the same way
        later = [t + 240.0 for t in times]
        eager = job._samples(later, noise)
        draws = rng.standard_normal((4, 2 * len(shape.nodes) + 1)).tolist()
        assert all("nodes" in s.__dict__ for s in eager)
        for sample, expected in zip((*samples, *eager), (*plain, *plain_samples(job, later, draws, noise)), strict=True):
            made = {name: repr(value) for name, value in sample.__dict__.items()}
            assert made == {name: repr(value) for name, value in expected.__dict__.items()}, link
            assert sample == expected and sample.steps_per_s > 0 and sample.cpu_used_cores > 0


def plain_samples(job, times, draws, noise) -> list[MetricSample]:
    """The samples ``job`` takes at ``times``, each made by the constructor from NodeMetrics."""
    template, batch, out = job._template(), job.model.model.batch_size, []
    count = len(template.names)
    for t, row in zip(times, draws, strict=True):
        cv = noise.warmup_cv if t - job.ready_s < noise.warmup_s else noise.steady_cv
        row = measured_row(template.true, cv, row, template.cap)
        nodes = tuple(
            NodeMetrics(template.names[i], template.roles[i], row[i], template.allocated[i],
                        template.memory_used[i], template.memory_allocated[i], row[count + i],
                        row[count + i], template.capacity[i], template.steps[i])
            for i in range(count)
        )  # fmt: skip
        out.append(MetricSample(t - job.started_s, nodes, row[-1], row[-1] * batch))
    return out


def test_optimus_decides_nothing_before_it_has_a_window():
    obs = Observation("j", 0.0, SHAPE, Resources(40), Resources(40))
    assert OptimusPolicy().decide(obs) is None  # no window yet


def test_a_run_is_still_a_pure_function_of_its_inputs():
    trace = nearchus_trace(3, 30)
    for name in ("optimus", "nearchus"):
        runs = [
            Simulator(CLUSTERS["B"], make_policy(name), SimConfig(seed=3)).run(trace)
            for _ in range(2)
        ]
        assert runs[0] == runs[1]


def test_remembered_shape_moves_give_the_same_object_and_the_plain_value():
    # Equal arguments -> the very same shape, equal to what the shape methods compute.
    up = scaled_up(SHAPE, 0.5)
    assert up is scaled_up(ClusterShape.from_dict(SHAPE.to_dict()), 0.5)
    assert up == SHAPE.scaled_up(Resources(SHAPE.total().cpu_cores * 0.5, 35))
    out = scaled_out(SHAPE, NodeRole.WORKER, 2)
    assert out is scaled_out(SHAPE, NodeRole.WORKER, 2) and out.n_workers == 5
    assert out.role_total(NodeRole.WORKER) == SHAPE.role_total(NodeRole.WORKER)
    assert with_node(SHAPE, NodeRole.PS, Resources(5)) == SHAPE.with_node_added(
        NodeRole.PS, Resources(5)
    )
    assert redistributed(SHAPE, NodeRole.WORKER, Resources(9)) is redistributed(
        SHAPE, NodeRole.WORKER, Resources(9)
    )
    assert one_ps_two_workers(Resources(15)) is one_ps_two_workers(Resources(15.0))


FINITE = st.floats(-1e12, 1e12, allow_nan=False)


@given(st.lists(st.tuples(st.floats(0, 1e10), FINITE, st.floats(0, 1e10)), max_size=9), FINITE)
def test_a_measured_row_is_measured_value_by_value(values, cv):
    true, draws, cap = (
        tuple(v[0] for v in values),
        [v[1] for v in values],
        tuple(v[2] for v in values),
    )
    row = measured_row(true, cv, draws, cap)
    plain = [measured(t, cv, d, c) for t, d, c in zip(true, draws, cap, strict=True)]
    assert [repr(x) for x in row] == [repr(x) for x in plain]  # bit for bit, signs of zero too


@given(st.lists(st.tuples(st.floats(0, 500), st.integers(0, 10**12)), min_size=3, max_size=3))
def test_headroom_is_the_budget_left_clipped_to_what_is_free(amounts):
    budget, used, free = (Resources(cpu, memory) for cpu, memory in amounts)
    obs = Observation("j", 0.0, ClusterShape.from_counts(1, 0, used, used), budget, free)
    left = Resources(
        max(0.0, budget.cpu_cores - used.cpu_cores), max(0, budget.memory_bytes - used.memory_bytes)
    )
    assert repr(obs.headroom) == repr(left.clipped_to(free))


def test_a_performance_remembers_its_hash_and_keeps_its_value_equality():
    model = JobModel(sim_model(nearchus_trace(1, 1).jobs[0].model), CLUSTERS["B"])
    perf = model.evaluate(SHAPE)
    copy = dataclasses.replace(perf)
    assert copy is not perf and copy == perf and hash(copy) == hash(perf)
    fields = (perf.steps_per_s, perf.samples_per_s, perf.bottleneck, perf.nodes)
    assert hash(perf) == hash(fields)  # what dataclass would compute
    assert perf.oom_nodes is perf.oom_nodes  # remembered, and what the nodes say:
    assert perf.oom_nodes == tuple(n.name for n in perf.nodes if n.oom)


def test_sample_templates_are_kept_per_run_and_found_by_performance():
    model = JobModel(sim_model(nearchus_trace(1, 1).jobs[0].model), CLUSTERS["B"])
    perf, templates = model.evaluate(SHAPE), {}
    first = sample_template(templates, perf, 1e9)
    assert sample_template(templates, perf, 1e9) is first
    assert sample_template(templates, dataclasses.replace(perf), 1e9) is first  # equal value
    assert sample_template(templates, perf, 2e9) is not first and len(templates) == 2
    assert sample_template({}, perf, 1e9) == first  # another run builds its own, equal one


def test_remembered_regressors_fit_exactly_what_the_plain_matrix_does():
    points = [(1, 2, 3.0), (1, 3, 4.1), (2, 2, 3.9), (2, 3, 5.5), (3, 3, 5.9), (0, 4, 9.0)]
    for mode in ("async", "sync"):
        usable = [(p, w, f) for p, w, f in points if p > 0]
        a = np.array([SpeedModel.features(mode, p, w, 64.0) for p, w, _ in usable])
        b = np.array([(w / f) if mode == "async" else (1 / f) for p, w, f in usable])
        theta = tuple(nnls(a, b)[0].tolist())
        for _ in range(2):  # the second time from the remembered matrix
            model = SpeedModel.fit(points, mode, 64.0)
            assert model == SpeedModel(mode, theta, 64.0)
            denominator = float(np.dot(np.array(theta), feature_row(mode, 2, 4, 64.0)))
            expected = 4 / denominator if mode == "async" else 1 / denominator
            assert model.predict(2, 4) == expected
    assert SpeedModel.fit(points[:3], "async") is None  # too few distinct (p, w) points


def test_stability_points_count_samples_and_tolerate_a_late_one():
    def at(*times):
        return tuple(MetricSample(t, (), 1.0, 1.0) for t in times)

    def sizes(window, period_s):
        return [len(p) for p in stability_points(window, period_s)]

    assert sizes(at(60.0, 120.0, 180.0), 60.0) == [1, 1, 1]  # one a period: every sample
    assert sizes(at(61.3, 121.3, 181.3, 241.3), 60.0) == [1, 1, 1, 1]
    # the runtime's 2 s clock: a sample 0.02 s early, one 1 s late (a checkpoint held the
    # master): still six consecutive points (cut on the clock, the late one ended the run)
    assert sizes(at(0.0, 2.0, 3.98, 6.0, 9.0, 10.0), 2.0) == [1] * 6
    assert sizes(at(0.0, 200.0), 60.0) == [1]  # a period with no sample: not consecutive
    assert sizes(at(*range(10, 130, 10)), 60.0) == [6, 6]  # six samples make a minute
    assert sizes(at(5.0), 60.0) == [1]


def test_finished_jobs_let_their_metrics_go_but_keep_their_results():
    trace = nearchus_trace(2, 12)
    sim = Simulator(CLUSTERS["B"], make_policy("nearchus"), SimConfig(seed=2))
    run = _Run(sim, trace)
    result = run.go()
    assert all(j.window == () and j.plans == () for j in run.jobs)  # all finished
    assert result == sim.run(trace)
    assert sum(j.restarts for j in result.jobs) > 0 and all(j.decisions for j in result.jobs)


def test_a_run_leaves_no_reference_cycle_so_the_paused_collector_misses_nothing():
    """The simulator pauses Python's cyclic collector during a run: safe only while every
    object it drops is freed by reference counting. Run every policy (and links shared
    cluster-wide) with the collector paused: a collection afterwards finds nothing."""
    trace = nearchus_trace(4, 30)
    gc.collect()
    with cyclic_gc_paused():
        for name in policy_names(Strategy.PS):
            if name == "static":
                continue  # it needs a shape; it plans nothing either
            for sharing in ("job", "cluster"):
                config = SimConfig(seed=4, link_sharing=sharing)
                Simulator(CLUSTERS["A"], make_policy(name), config).run(trace)
                assert not gc.isenabled()  # a run restores the collector as it found it
                assert gc.collect() == 0, (name, sharing)
    assert gc.isenabled()


def test_derived_values_stay_out_of_the_value():
    obs = Observation("j", 0.0, SHAPE, Resources(40, 100), Resources(30, 100))
    assert obs.headroom == Resources(24.75, 30) and obs.readings.of("k", lambda: 1) == 1
    other = dataclasses.replace(obs, free=Resources(20, 100))
    assert other != obs and other.headroom == Resources(20, 30)
    assert other.readings.of("k", lambda: 2) == 2  # its own readings
    plain = Observation("j", 0.0, SHAPE, Resources(40, 100), Resources(30, 100))
    assert plain == obs and repr(plain) == repr(obs) and "readings" not in repr(obs)
