"""The discrete-event simulator on tiny traces whose completion times are computed by hand."""

import math
from dataclasses import replace

import pytest

from rightsize.cluster.clusters import CLUSTERS
from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import ClusterSpec, SimModel
from rightsize.cluster.models import sim_model
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import Trace, TraceJob, nearchus_trace
from rightsize.core.errors import ResourceError, SpecError, UnknownNameError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling.api import Action, Observation, Plan, Policy
from rightsize.scaling.launch import INITIAL_SHAPE_REASON
from rightsize.scaling.registry import make_policy
from rightsize.scaling.static import StaticPolicy

# 1 core-s per sample, 10 samples per step; 100-byte model; the PS needs 0.1 core-s per step.
TOY = SimModel("toy", 100, (60, 40), 1.0, 10, 0.1, 1000)
# 30 vCPU on servers so big that the MU cap (~58 cores) and the links never bind.
TOY_CLUSTER = ClusterSpec("toy", 30, 10**12, 100, 10**11, 1e9)
SMALL = ClusterShape.from_counts(1, 2, Resources(2), Resources(9))  # 20 cpu: 18 samples/s
LARGE = ClusterShape.from_counts(1, 2, Resources(2), Resources(18))  # 38 cpu: 36 samples/s


def toy_models(name: str) -> SimModel:
    return TOY if name == "toy" else sim_model(name)


def job(name, arrival, samples=18_000.0, budget=40.0) -> TraceJob:
    return TraceJob(name, arrival, "toy", Resources(budget), samples_total=samples)


def simulate(trace_jobs, policy, cluster=TOY_CLUSTER, **config):
    sim = Simulator(cluster, policy, SimConfig(**config), models=toy_models)
    return sim.run(Trace("t", tuple(trace_jobs)))


def test_one_job_runs_after_its_launch_delay():
    # launch 20 s + init 100 s, then 18,000 samples at 2 workers x 9 cpu / 1 core-s = 18/s
    result = simulate([job("a", 0)], StaticPolicy(SMALL))
    (a,) = result.jobs
    assert (a.queue_s, a.run_s, a.jct_s) == (0, 1120, 1120)
    assert a.best_steps_per_s == pytest.approx(1.8) and a.restarts == 0


def test_a_job_that_does_not_fit_waits_for_the_one_before_it():
    # 30 cpu: the first job holds 20, the second (arriving at 60 s) waits until 1120 s
    result = simulate([job("a", 0), job("b", 60)], StaticPolicy(SMALL))
    a, b = result.jobs
    assert b.queue_s == 1060 and b.run_s == 1120 and b.jct_s == 2180
    assert result.makespan_s == 2240
    summary = result.summary()
    assert summary["avg_jct_s"] == (1120 + 2180) / 2 and summary["avg_queue_s"] == 530
    # 20 of 30 cpu held for all but the launch delays; used = 18 workers + 0.18 PS
    assert summary["cpu_allocated_pct"] == pytest.approx(100 * 20 / 30)
    assert summary["cpu_used_pct"] == pytest.approx(100 * 18.18 * 2000 / (30 * 2240))


def test_sjf_runs_the_short_job_first():
    jobs = [job("a", 0), job("long", 1, samples=36_000), job("short", 2, samples=9_000)]
    fcfs = {j.name: j.finish_s for j in simulate(jobs, StaticPolicy(SMALL)).jobs}
    sjf = {j.name: j.finish_s for j in simulate(jobs, StaticPolicy(SMALL), order="sjf").jobs}
    assert fcfs["long"] < fcfs["short"]  # 1120 + 2120 = 3240 < 3240 + 620
    assert (sjf["short"], sjf["long"]) == (1120 + 620, 1740 + 2120)


class ResizeOnce(Policy):
    """Launches SMALL and asks for LARGE at its first decision."""

    name = "resize-once"

    def initial_shape(self, budget, free):
        return SMALL if SMALL.total().fits_within(free) else None

    def decide(self, observation: Observation):
        if observation.decisions == 0:
            return Plan(LARGE, Action.SCALE_UP, "twice the worker cpu")
        return None


def test_a_reconfiguration_pays_the_restart_cost():
    # ready at 120 s; first decision at 180 s (60 s later): 60 s x 18 = 1,080 samples done;
    # restart until 300 s, then 16,920 samples at 36/s = 470 s -> done at 770 s
    result = simulate([job("a", 0)], ResizeOnce(), cluster=ClusterSpec("c", 40, 10**12, 100,
                                                                      10**11, 1e9))  # fmt: skip
    (a,) = result.jobs
    assert a.run_s == pytest.approx(770) and a.restarts == 1
    assert a.decisions == ("resize-once: launch with 1 ps (2 cpu) + 2 workers (18 cpu)",
                           "twice the worker cpu")  # fmt: skip
    assert a.time_to_reach_s == 300  # 36/s, its best, from 300 s on


class OverBudget(ResizeOnce):
    def decide(self, observation):
        return Plan(ClusterShape.from_counts(1, 2, Resources(2), Resources(30)), Action.SCALE_UP,
                    "too much")  # fmt: skip


def test_a_plan_beyond_the_budget_is_a_policy_bug():
    with pytest.raises(RuntimeError, match="exceeds the budget 40"):
        simulate([job("a", 0)], OverBudget(), cluster=CLUSTERS["B"])


def test_user_errors_name_the_job():
    with pytest.raises(ResourceError, match="job tiny: budget 1 cpu is below nearchus"):
        simulate([job("tiny", 0, budget=1)], make_policy("nearchus"))
    bad = TraceJob("x", 0, "resnet5", Resources(40), samples_total=1.0)
    with pytest.raises(UnknownNameError, match="unknown simulated model 'resnet5'"):
        simulate([bad], StaticPolicy(SMALL))


def test_an_oom_job_nobody_can_fix_fails_and_frees_its_cpu():
    # started as the trace says (an initial shape is not raised to the floors), with the
    # budget's memory all in the shape: the mechanism cannot double the workers' 10 B
    starved = ClusterShape.from_counts(1, 2, Resources(2, 10**9), Resources(9, 10))
    full = Resources(40, starved.total().memory_bytes)
    trace = [replace(job(n, t), budget=full, initial_shape=starved) for n, t in (("a", 0), ("b", 10))]
    result = simulate(trace, StaticPolicy(starved), oom_patience_s=600)
    a, b = result.jobs
    assert a.failed and b.failed
    assert a.finish_s == pytest.approx(120 + 600, abs=60)


def test_an_oom_kill_the_policy_leaves_alone_is_doubled_by_the_mechanism():
    # as the runtime does (scaling.oom): the static policy never changes a shape, the
    # simulator doubles the workers' memory until they hold what they need, and the job ends
    starved = ClusterShape.from_counts(1, 2, Resources(2, 10**9), Resources(9, 10))
    result = simulate([replace(job("a", 0), initial_shape=starved)], StaticPolicy(starved))
    (a,) = result.jobs
    assert not a.failed and a.restarts >= 1
    assert a.decisions[0] == INITIAL_SHAPE_REASON


def test_an_initial_shape_starts_as_it_is_under_every_policy():
    # the runtime's explicit initial_shape (scaling.launch): not the policy's launch, and not
    # raised to the floors — the workers' 10 B are OOM-killed and then doubled by the mechanism
    starved = ClusterShape.from_counts(1, 2, Resources(2, 10**9), Resources(9, 10))
    for name in ("nearchus", "dlrover", "optimus"):
        (a,) = simulate([replace(job("a", 0), initial_shape=starved)], make_policy(name)).jobs
        assert a.decisions[0] == INITIAL_SHAPE_REASON, name
        assert "OOM" in a.decisions[1], name  # the policy or the safety net grows it


def test_an_initial_shape_beyond_the_budget_is_the_users_error():
    big = ClusterShape.from_counts(1, 2, Resources(2), Resources(30))
    with pytest.raises(SpecError, match="job a: its initial shape .* exceeds the budget 40"):
        simulate([replace(job("a", 0), initial_shape=big)], make_policy("nearchus"))


def test_an_initial_shape_waits_until_the_cluster_can_hold_it():
    jobs = [replace(job(n, t), initial_shape=SMALL) for n, t in (("a", 0), ("b", 60))]
    a, b = simulate(jobs, make_policy("dlrover")).jobs  # 30 cpu: b's 20 wait for a's
    assert b.start_s >= a.finish_s


class Lean(ResizeOnce):
    """Launches SMALL with 10 B per node, then asks for LARGE with 10 B per node."""

    def launch_plan(self, request):
        return Plan(with_memory(SMALL, 10), Action.LAUNCH, "lean launch")

    def decide(self, observation):
        if observation.decisions == 0:
            return Plan(with_memory(LARGE, 10), Action.SCALE_UP, "lean scale-up")
        return None


def with_memory(shape: ClusterShape, memory: int) -> ClusterShape:
    for node in shape.nodes:
        shape = shape.with_resources(node.name, Resources(node.resources.cpu_cores, memory))
    return shape


def test_every_plan_is_raised_to_the_memory_floors():
    # TOY: a worker needs 1000 B, a PS 256 MiB + 3 B per parameter byte (jobmodel)
    cluster = ClusterSpec("c", 40, 10**12, 100, 10**11, 1e9)
    (a,) = simulate([job("a", 0)], Lean(), cluster=cluster).jobs
    assert a.restarts == 1 and not a.failed  # no OOM kill: launch and resize both raised
    assert [d.split(";")[0] for d in a.decisions] == ["lean launch", "lean scale-up"]
    raised = "memory raised to floors: ps-0 10B->256Mi, worker-0 10B->1000B, worker-1 10B->1000B"
    assert all(d.endswith(raised) for d in a.decisions)


def test_a_plan_whose_floors_exceed_the_budget_is_refused_and_the_job_keeps_its_shape():
    # as the runtime refuses it (reshape.rejection): the budget's memory holds the launch's
    # floors, not the resize's (the same nodes: the floors alone would not fit the budget)
    cluster = ClusterSpec("c", 40, 10**12, 100, 10**11, 1e9)
    floors = TOY.ps_memory_bytes(1.0) + 2 * TOY.worker_memory_bytes
    tight = replace(job("a", 0), budget=Resources(40, floors))

    class Grows(Lean):
        def decide(self, observation):
            more = with_memory(LARGE, 10).with_node_added(NodeRole.WORKER, Resources(1, 10))
            return Plan(more, Action.ADD_WORKER, "one more worker")

    (a,) = simulate([tight], Grows(), cluster=cluster).jobs
    assert a.restarts == 0 and not a.failed and a.final_shape == SMALL.describe()
    assert a.run_s == pytest.approx(1120)  # SMALL's time: the refusals cost nothing


def test_durations_in_a_trace_become_work_at_the_budget_as_one_ps_two_workers():
    # 30 cpu as (1, 2, 10, 20): workers 10 cpu each -> 2 steps/s -> 20 samples/s; 1000 s
    trace_job = TraceJob("d", 0, "toy", Resources(30), duration_s=1000)
    result = simulate([trace_job], make_policy("static"))
    assert result.jobs[0].run_s == pytest.approx(1120)


def test_same_seed_same_run_other_seed_other_noise():
    trace = nearchus_trace(3)
    runs = [Simulator(CLUSTERS["A"], make_policy("nearchus+"), SimConfig(seed=s)).run(trace)
            for s in (3, 3, 4)]  # fmt: skip
    assert runs[0] == runs[1]
    assert runs[0].summary() != runs[2].summary()


def test_every_policy_finishes_the_nearchus_trace_on_cluster_b():
    trace = nearchus_trace(2)
    for name in ("nearchus", "nearchus+", "dlrover", "optimus", "fa-bf"):
        result = Simulator(CLUSTERS["B"], make_policy(name), SimConfig(seed=2)).run(trace)
        assert not any(j.failed for j in result.jobs), name
        assert all(math.isfinite(j.jct_s) and j.jct_s >= j.run_s > 0 for j in result.jobs)
        assert max(u[2] for u in result.usage) <= 300 + 0.1  # never more than the cluster
