"""Servers' links shared across jobs (``cluster.links``): hand-computed rates and JCTs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rightsize.cluster.clusters import CLUSTERS
from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import ClusterSpec, JobModel, SimModel
from rightsize.cluster.models import sim_model
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import Trace, TraceJob, nearchus_trace, single_job
from rightsize.core.errors import UnknownNameError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.registry import make_policy
from rightsize.scaling.static import StaticPolicy

# 1 core-s per sample, 10 samples per step: 10 core-s per worker step; 100 bytes of
# parameters in one tensor; a PS applies a step's update in 0.1 core-s.
LINKY = SimModel("linky", 100, (100,), 1.0, 10, 0.1, 1000)
# Two servers with 100 B/s links; 40 vCPU; servers so big the MU cap (~58 cores) never binds.
TWO_SERVERS = ClusterSpec("two", 40, 10**12, 100, 10**11, 100.0, servers=2)
# 1 PS (1 core) + 1 worker (10 cores): 11 cpu. Alone, each node has a server's link:
# the worker computes a step in 10/10 = 1 s and moves 100 B each way in 100/100 = 1 s
# -> 1 step/s = 10 samples/s (the PS could apply 1/0.1 = 10 steps/s, and carry 100/100 = 1).
PAIR = ClusterShape.from_counts(1, 1, Resources(1), Resources(10))


def linky_job(name: str, samples: float, arrival: float = 0.0) -> TraceJob:
    return TraceJob(name, arrival, "linky", Resources(11), samples_total=samples)


def run(trace_jobs, sharing: str, policy=None):
    config = SimConfig(link_sharing=sharing)
    sim = Simulator(TWO_SERVERS, policy or StaticPolicy(PAIR), config, models=lambda _: LINKY)
    return sim.run(Trace("t", tuple(trace_jobs)))


def test_a_job_alone_keeps_its_links_and_others_halve_them():
    model = JobModel(LINKY, TWO_SERVERS)
    alone = model.evaluate(PAIR)
    assert alone.samples_per_s == pytest.approx(10)
    assert model.evaluate_shared(PAIR, 2) is alone  # its own 2 nodes on 2 servers
    # 4 nodes on 2 servers: 50 B/s each -> 2 s per worker step, the PS carries 0.5 step/s
    both = model.evaluate_shared(PAIR, 4)
    assert both.samples_per_s == pytest.approx(5) and both.bottleneck == "workers"
    assert both.nodes[0].net_bytes_per_s == pytest.approx(50)  # the PS's link is full
    assert model.evaluate_shared(PAIR, 4) is both  # cached


def test_a_job_the_smaller_share_does_not_limit_keeps_its_performance():
    # the worker at 1 core: 10 s of compute per step; 100 B over 25 B/s (8 nodes) = 4 s
    slow = ClusterShape.from_counts(1, 1, Resources(1), Resources(1))
    model = JobModel(LINKY, TWO_SERVERS)
    assert model.evaluate_shared(slow, 8) is model.evaluate(slow)
    assert model.evaluate_shared(slow, 40).samples_per_s < model.evaluate(slow).samples_per_s


@settings(max_examples=60, deadline=None)
@given(
    ps=st.lists(st.floats(0.5, 20), min_size=1, max_size=3),
    workers=st.lists(st.floats(0.5, 30), min_size=1, max_size=4),
    sharing=st.integers(1, 60),
    model=st.sampled_from(["resnet50", "mobilenet", "nasnetlarge"]),
)
def test_the_shared_shortcut_is_exactly_the_full_evaluation(ps, workers, sharing, model):
    spec = ClusterShape.from_counts(len(ps), len(workers), Resources(1), Resources(1))
    for node, cores in zip(spec.nodes, (*ps, *workers), strict=True):
        spec = spec.with_resources(node.name, Resources(cores))
    jm = JobModel(sim_model(model), CLUSTERS["A"])
    nodes = max(sharing, len(spec.nodes))
    full = jm._evaluate(spec, jm.node_link_bytes_per_s(nodes))
    assert jm.evaluate_shared(spec, sharing) == full


def test_two_jobs_halve_each_others_rate_and_recover_when_one_finishes():
    # both launch at 0 and train from 120 s (20 s launch + 100 s init). Together: 5/s each.
    # b's 1,000 samples take 200 s -> done at 320; a has 1,000 by then, and its other 2,000
    # at 10/s take 200 s -> done at 520. Alone (per-job links): 300 s and 100 s.
    jobs = [linky_job("a", 3000), linky_job("b", 1000)]
    a, b = run(jobs, "cluster").jobs
    assert (a.jct_s, b.jct_s) == (pytest.approx(520), pytest.approx(320))
    assert [t for t, _, _ in a.timeline] == pytest.approx([0, 120, 320, 520])
    assert [rate for _, rate, _ in a.timeline] == pytest.approx([0, 5, 10, 0])
    assert a.best_steps_per_s == pytest.approx(1.0)  # the 10/s of 120 s lasted no time
    a, b = run(jobs, "job").jobs
    assert (a.jct_s, b.jct_s) == (pytest.approx(420), pytest.approx(220))


def test_a_launching_job_loads_no_link_until_it_trains():
    # a trains alone at 10/s from 120 s; b arrives at 200 s and trains from 320 s:
    # a did 2,000 samples alone, then 5/s. a: 1,000 left -> 200 s -> done at 520; b then
    # has 1,000 of 2,000, the rest at 10/s -> done at 620 (JCT 420).
    jobs = [linky_job("a", 3000), linky_job("b", 2000, arrival=200)]
    a, b = run(jobs, "cluster").jobs
    assert a.jct_s == pytest.approx(520) and b.jct_s == pytest.approx(420)


def test_a_lone_job_is_the_same_under_both_models():
    trace = single_job("resnet50", 100, 30)
    results = [
        Simulator(CLUSTERS["A"], make_policy("nearchus"), SimConfig(link_sharing=m)).run(trace)
        for m in ("job", "cluster")
    ]
    assert results[0] == results[1]


def test_cluster_sharing_is_deterministic_by_seed_and_keeps_exact_progress():
    trace = nearchus_trace(2, 12)
    runs = [
        Simulator(
            CLUSTERS["A"], make_policy("optimus"), SimConfig(seed=s, link_sharing="cluster")
        ).run(trace)
        for s in (2, 2, 3)
    ]
    assert runs[0] == runs[1] and runs[0].summary() != runs[2].summary()
    alone = Simulator(CLUSTERS["A"], make_policy("optimus"), SimConfig(seed=2)).run(trace)
    assert alone.summary()["avg_run_s"] < runs[0].summary()["avg_run_s"]  # links are shared
    totals = {j.name: j.samples_total for j in trace.jobs}
    for job in runs[0].jobs:  # the samples processed, rate by rate, are the job's samples
        steps = zip(job.timeline, job.timeline[1:], strict=False)
        done = sum(rate * (t1 - t0) for (t0, rate, _), (t1, *_) in steps)
        assert done == pytest.approx(totals[job.name], rel=1e-9)


def test_an_unknown_link_sharing_model_is_named():
    with pytest.raises(UnknownNameError, match="link sharing 'clustre'.*cluster"):
        SimConfig(link_sharing="clustre")
