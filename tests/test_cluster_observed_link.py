"""The link capacity node metrics report (``SimConfig.observed_link``): hand-computed numbers.

``server``: every node's capacity is its server's whole link (NEARCHUS §IV's "90% of the
cluster network capacity"); ``share``: the share ``link · min(1, S / n)`` it trains at.
"""

import pytest

from rightsize.cluster.clusters import CLUSTERS
from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import ClusterSpec, SimModel
from rightsize.cluster.simjob import Noise
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import Trace, TraceJob, nearchus_trace
from rightsize.core.errors import UnknownNameError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import Action
from rightsize.scaling.nearchus import NearchusParams, NearchusPolicy, psn_bottleneck
from rightsize.scaling.registry import make_policy
from rightsize.scaling.static import StaticPolicy

# 1 core-s per sample, 10 samples per step (10 core-s per worker step); 100 bytes of
# parameters in one tensor; a PS applies a step's update in 0.1 core-s.
LINKY = SimModel("linky", 100, (100,), 1.0, 10, 0.1, 1000)
# S = 2 servers with 100 B/s links; servers so big the MU cap (~58 cores) never binds.
TWO_SERVERS = ClusterSpec("two", 40, 10**12, 100, 10**11, 100.0, servers=2)
EXACT = Noise(steady_cv=0.0, warmup_cv=0.0)  # no noise: every sample is the true value


class RecordingNearchus(NearchusPolicy):
    """Faithful NEARCHUS that remembers every observation and plan."""

    def __init__(self, **params) -> None:
        super().__init__(**params)
        self.seen = []

    def decide(self, observation):
        plan = super().decide(observation)
        self.seen.append((observation, plan))
        return plan


class RecordingStatic(StaticPolicy):
    """A fixed shape, asked every interval, deciding nothing."""

    def __init__(self, shape: ClusterShape) -> None:
        super().__init__(shape)
        self.seen = {}

    def decide(self, observation):
        self.seen.setdefault(observation.job, []).append(observation)
        return None

    def decision_due_s(self, observation) -> float:
        return observation.time_s


def simulate(policy, jobs, sharing: str, observed: str, decision_interval_s: float = 60.0):
    config = SimConfig(
        link_sharing=sharing,
        observed_link=observed,
        noise=EXACT,
        decision_interval_s=decision_interval_s,
    )
    sim = Simulator(TWO_SERVERS, policy, config, models=lambda _: LINKY)
    return sim.run(Trace("t", tuple(jobs)))


def first_plan(observed: str):
    """NEARCHUS's first decision on one 30-cpu job, launched whole as (1, 2, 10, 20), and the
    observation it was made on."""
    policy = RecordingNearchus(launch_min_cores=30)
    simulate(policy, [TraceJob("j", 0, "linky", Resources(30), samples_total=30_000)],
             "job", observed)  # fmt: skip
    return next((obs, plan) for obs, plan in policy.seen if plan is not None)


@pytest.mark.parametrize(("observed", "utilization"), [("share", 1.0), ("server", 2 / 3)])
def test_a_ps_at_its_share_reads_full_only_against_its_share(observed, utilization):
    # 3 nodes on 2 servers: each node's share is 100·2/3 = 66.7 B/s. A worker computes a
    # step in 10/10 = 1 s and moves 100 B in 100/66.7 = 1.5 s: the two want 1.33 steps/s,
    # the PS link carries 66.7/100 = 0.667 -> PSN caps the job at 0.667 steps/s, the PS
    # moving 66.7 B/s: its whole share (utilization 1), S/n = 2/3 of its server's link.
    obs, plan = first_plan(observed)
    ps = [s.nodes.net_utilization_of("ps-0") for s in obs.window]
    assert ps == pytest.approx([utilization] * len(ps))
    # e_job = (0.0667 PS + 2 · 3.33 workers) / 30 = 0.224 < 0.95: PSN is asked
    assert sum(s.cpu_used_cores for s in obs.window) / len(obs.window) == pytest.approx(
        0.2 / 3 + 20 / 3
    )
    fires = observed == "share"
    assert (psn_bottleneck(obs.window, NearchusParams()) == "ps-0") is fires
    assert (plan.action == Action.ADD_PS) is fires
    if fires:
        assert "PSN bottleneck on ps-0" in plan.reason


def test_cluster_wide_the_reported_share_follows_other_jobs_from_the_instant_they_train():
    # a: 1 PS (1 core) + 1 worker (5 cores): a step is 10/5 = 2 s of compute, 100 B over a
    # whole 100-B/s link 1 s -> 0.5 steps/s, the PS moving 50 B/s. b (the same shape) arrives
    # at 200 s and trains from 320 s: 4 nodes on 2 servers, 50 B/s each. a's worker now moves
    # 100 B in 2 s, no longer than its compute, so a keeps 0.5 steps/s (its performance does
    # not change) but its PS fills its share: utilization 0.5 -> 1.0 against the share, 0.5
    # throughout against the server. a is asked every 120 s (at 240, 360, ...), so its sample
    # at 300 s is first taken when b starts, at 320 s: at the share it had until then.
    shape = ClusterShape.from_counts(1, 1, Resources(1), Resources(5))
    jobs = [TraceJob(n, t, "linky", Resources(6), samples_total=20_000) for n, t in
            (("a", 0), ("b", 200))]  # fmt: skip
    for observed, after in (("share", 1.0), ("server", 0.5)):
        policy = RecordingStatic(shape)
        result = simulate(policy, jobs, "cluster", observed, decision_interval_s=120)
        samples = {s.time_s: s for obs in policy.seen["a"] for s in obs.window}
        capacity = {t: s.nodes[0].net_capacity_bytes_per_s for t, s in samples.items()}
        utilization = {t: s.nodes[0].net_utilization for t, s in samples.items()}
        assert capacity[300] == 100 and utilization[300] == pytest.approx(0.5)  # b starting
        assert capacity[360] == (50 if observed == "share" else 100)  # b trains from 320 s
        assert utilization[360] == pytest.approx(after)
        assert result.jobs[0].timeline[1][1] == pytest.approx(5.0)  # 0.5 steps/s, unchanged


def test_policies_that_read_no_link_utilization_are_unchanged_by_it():
    trace = nearchus_trace(2, 12)
    for policy in ("optimus", "dlrover"):
        runs = [
            Simulator(
                CLUSTERS["A"], make_policy(policy), SimConfig(seed=2, link_sharing="cluster",
                                                              observed_link=observed)
            ).run(trace)
            for observed in ("server", "share")
        ]  # fmt: skip
        assert runs[0] == runs[1]


def test_share_is_deterministic_by_seed():
    trace = nearchus_trace(3, 12)
    runs = [
        Simulator(
            CLUSTERS["A"], make_policy("nearchus"),
            SimConfig(seed=s, link_sharing="cluster", observed_link="share"),
        ).run(trace)
        for s in (3, 3, 4)
    ]  # fmt: skip
    assert runs[0] == runs[1] and runs[0].summary() != runs[2].summary()


def test_an_unknown_observed_link_is_named():
    with pytest.raises(UnknownNameError, match="observed link 'shared'.*share"):
        SimConfig(observed_link="shared")
