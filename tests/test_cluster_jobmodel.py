"""The simulated job's performance model: each bottleneck on a tiny hand-computable model."""

import pytest

from rightsize.cluster.clusters import CLUSTERS, GBPS, parse_cluster
from rightsize.cluster.jobmodel import ClusterSpec, JobModel, SimModel, mu_cores, partition_shares
from rightsize.cluster.models import NEARCHUS_CNNS, model_names, sim_model
from rightsize.core.errors import SpecError, UnknownNameError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape

# 10 core-s per step, 100 bytes of parameters, a PS needs 1 core-s per step to update.
TINY = SimModel("tiny", 100, (50, 30, 20), 1.0, 10, 1.0, 1000)


def cluster(link=1e9, server=20, servers=0) -> ClusterSpec:
    return ClusterSpec("t", 100, 10**12, server, 10**11, link, servers=servers)


def shape(ps=(10.0,), workers=(5.0, 5.0)) -> ClusterShape:
    s = ClusterShape.from_counts(len(ps), len(workers), Resources(1), Resources(1))
    for node, cores in zip(s.nodes, (*ps, *workers), strict=True):
        s = s.with_resources(node.name, Resources(cores))
    return s


def test_mu_cap_follows_nearchus_fig_3():
    assert mu_cores(20) == 16 and mu_cores(32) == 21 and mu_cores(64) == 37
    assert mu_cores(26) == pytest.approx(18.5)  # halfway between 16 and 21
    assert mu_cores(10) == 8  # 16/20 of a smaller server


def test_greedy_partition_puts_the_largest_tensor_on_the_emptiest_ps():
    # 50 -> ps0; 30 -> ps1; 20 -> ps1 (30 < 50): 50 : 50
    assert partition_shares((50, 30, 20), 2) == (0.5, 0.5)
    # (60, 30, 10) on 2 PS: 60 | 30 + 10 -> a hot PS with 60%
    assert partition_shares((60, 30, 10), 2) == (0.6, 0.4)
    assert partition_shares((60, 30, 10), 1) == (1.0,)


def test_compute_bound_workers_use_all_their_cpu():
    # 5 cores / 10 core-s = 0.5 steps/s per worker; links and PS are far from limits
    perf = JobModel(TINY, cluster()).evaluate(shape())
    assert perf.bottleneck == "workers"
    assert perf.steps_per_s == pytest.approx(1.0) and perf.samples_per_s == pytest.approx(10)
    assert [n.cpu_used_cores for n in perf.nodes] == pytest.approx([1.0, 5, 5])  # PS: 1 x 1
    assert perf.nodes[1].net_bytes_per_s == pytest.approx(50)  # 0.5 steps/s x 100 bytes


def test_mu_caps_what_a_worker_can_use():
    # a 20-core server caps one worker at 16 cores: 18 cores allocated, 16 used
    perf = JobModel(TINY, cluster(server=20)).evaluate(shape(workers=(18.0,)))
    assert perf.nodes[1].cpu_used_cores == pytest.approx(16)


def test_ps_network_caps_the_step_rate_and_fills_the_link():
    # a 120 B/s link: 1 PS moves 100 B per step -> at most 1.2 steps/s; three workers
    # want 3 x 1.0 (compute-bound: 100 B each way over a full-duplex 120 B/s link is 0.83 s)
    perf = JobModel(TINY, cluster(link=120)).evaluate(shape(workers=(10.0, 10.0, 10.0)))
    assert perf.bottleneck == "ps-network" and perf.steps_per_s == pytest.approx(1.2)
    assert perf.nodes[0].net_bytes_per_s == pytest.approx(120)
    assert perf.nodes[1].cpu_used_cores == pytest.approx(4)  # 0.4 steps/s x 10 core-s


def test_worker_link_slows_a_worker_when_transfer_outlasts_compute():
    # 100 B in and 100 B out at once over a full-duplex 50 B/s link = 2 s per step
    # > 10 core-s / 10 cores = 1 s
    perf = JobModel(TINY, cluster(link=50)).evaluate(shape(ps=(10.0, 10.0), workers=(10.0,)))
    assert perf.steps_per_s == pytest.approx(0.5)


def test_nodes_share_their_servers_links():
    # 4 nodes on 2 servers: each gets half of a 100 B/s link, 50 B/s -> the worker's
    # 100 B each way take 2 s per step; the PS (share 1/2 each) caps at 50 / 50 = 1 step/s
    spread = shape(ps=(10.0, 10.0), workers=(10.0, 10.0))
    perf = JobModel(TINY, cluster(link=100, servers=2)).evaluate(spread)
    assert perf.steps_per_s == pytest.approx(2 * 0.5)
    # on 4 or more servers every node has a link of its own: compute-bound, 2 x 1 step/s
    alone = JobModel(TINY, cluster(link=100, servers=4)).evaluate(spread)
    assert alone.steps_per_s == pytest.approx(2.0) and alone.bottleneck == "workers"


def test_ps_compute_caps_the_rate_and_saturates_the_ps():
    # PS 0.5 cores / 1 core-s per step -> 0.5 steps/s; workers could do 1
    perf = JobModel(TINY, cluster()).evaluate(shape(ps=(0.5,)))
    assert perf.bottleneck == "ps-compute" and perf.steps_per_s == pytest.approx(0.5)
    assert perf.nodes[0].cpu_used_cores == pytest.approx(0.5)


def test_a_hot_ps_limits_the_job_however_many_ps_are_added():
    # 90% of the parameters in one tensor: its PS link caps the job at 100 / 90 steps/s;
    # four link-bound workers would do 4 x 1
    hot = SimModel("hot", 100, (90, 5, 5), 1.0, 10, 1.0, 1000)
    workers = (20, 20, 20, 20)
    two = JobModel(hot, cluster(link=100)).evaluate(shape(ps=(10, 10), workers=workers))
    three = JobModel(hot, cluster(link=100)).evaluate(shape(ps=(10, 10, 10), workers=workers))
    assert two.steps_per_s == pytest.approx(100 / 90) == three.steps_per_s


def test_too_little_memory_is_an_oom():
    perf = JobModel(TINY, cluster()).evaluate(
        ClusterShape.from_counts(1, 1, Resources(1, 10**9), Resources(5, 500))
    )
    assert perf.oom_nodes == ("worker-0",)
    with pytest.raises(SpecError, match="needs a PS and a worker"):
        JobModel(TINY, cluster()).evaluate(
            ClusterShape.from_counts(0, 1, Resources(1), Resources(1))
        )


def test_resnet50_reproduces_the_calibration_point_nearchus_fig_5a():
    # (1 PS, 2 workers) on dedicated 64-core servers: ~36 vCPU per worker at 10 Gbps, ~16 at 1
    model = sim_model("resnet50")
    big = ClusterShape.from_counts(1, 2, Resources(64), Resources(64))
    fast = JobModel(model, ClusterSpec("x", 999, 10**13, 64, 10**12, 10 * GBPS)).evaluate(big)
    slow = JobModel(model, ClusterSpec("x", 999, 10**13, 64, 10**12, 1 * GBPS)).evaluate(big)
    assert fast.nodes[1].cpu_used_cores == pytest.approx(36, abs=2)
    assert slow.nodes[1].cpu_used_cores == pytest.approx(16, abs=2)


def test_every_simulated_model_is_built_and_documented():
    assert set(NEARCHUS_CNNS) <= set(model_names())
    for name in model_names():
        model = sim_model(name)
        assert model.param_bytes > 0 and model.step_core_s > 0 and model.source
    assert sim_model("nasnetlarge").param_bytes == 4 * 84_900_000  # NEARCHUS Table II
    with pytest.raises(UnknownNameError, match="did you mean 'resnet50'"):
        sim_model("resnet5")


def test_clusters_a_b_and_custom():
    assert CLUSTERS["A"].capacity.cpu_cores == 100 and CLUSTERS["B"].cpu_cores == 300
    assert parse_cluster("b") is CLUSTERS["B"]
    assert CLUSTERS["A"].servers == 9 == CLUSTERS["B"].servers  # NEARCHUS Table I
    custom = parse_cluster("cpu=64,net_gbps=10,server_cores=16")
    assert custom.cpu_cores == 64 and custom.link_bytes_per_s == 10 * GBPS
    assert custom.servers == 4  # 64 vCPU of 16-core servers
    assert parse_cluster("cpu=64,net_gbps=10,servers=6").servers == 6
    with pytest.raises(SpecError, match="servers"):
        parse_cluster("cpu=64,net_gbps=10,servers=0")
    with pytest.raises(UnknownNameError, match="unknown cluster 'C'"):
        parse_cluster("C")
    with pytest.raises(SpecError, match="net_gbps"):
        parse_cluster("cpu=64")


def test_memory_floors_are_what_each_node_given_memory_must_hold():
    # a PS: 256 MiB + 3 bytes per parameter byte it holds (50 : 50 on two PS); a worker: its
    # 1000 bytes — the memory below which the model OOM-kills the node
    model = JobModel(TINY, cluster())
    two = ClusterShape.from_counts(2, 1, Resources(1, 10), Resources(1, 10))
    base = 256 * 2**20
    assert model.memory_floors(two) == {"ps-0": base + 150, "ps-1": base + 150, "worker-0": 1000}
    perf = model.evaluate(two)
    assert {n.name: n.memory_needed_bytes for n in perf.nodes} == model.memory_floors(two)
    # a node given no memory (a CPU-only budget) is not limited here, and has no floor
    assert model.memory_floors(shape()) == {}
    mixed = two.with_resources("worker-0", Resources(1))
    assert model.memory_floors(mixed) == {"ps-0": base + 150, "ps-1": base + 150}
    # a model may say what its PS holds (the right-sizing benchmark fits the runtime's floors)
    lean = JobModel(SimModel("t", 100, (50, 50), 1.0, 10, 1.0, 1000, "", 5, 2.5), cluster())
    assert lean.memory_floors(two) == {"ps-0": 5 + 125, "ps-1": 5 + 125, "worker-0": 1000}
