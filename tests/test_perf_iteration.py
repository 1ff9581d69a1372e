import math

import numpy as np
import pytest

from rightsize.perf.comm import (
    GBPS,
    AnalyticCommModel,
    CommModel,
    Link,
    allreduce_time,
    bus_bandwidth_from_time,
    round_up_pow2,
)
from rightsize.perf.iteration import (
    ComputeDraw,
    LayerGrad,
    ddp_buckets,
    ddp_copy_s,
    exchange_time,
    simulate_iteration,
    straggler_compute,
)
from rightsize.perf.ps import (
    PSModel,
    PSSpec,
    WorkerSpec,
    predict_ps,
    ps_throughput,
    ps_throughput_queueing,
)

LINK = Link("test", rated_gbps=8.0)


class FlatComm(CommModel):
    """Every transfer alone gets 1 GB/s of bus bandwidth; the link carries 1 GB/s in all."""

    kind = "flat"

    def bus_bandwidth(self, size_bytes, world, link, concurrent=1):
        return 1e9


def test_bus_bandwidth_formula_round_trips():
    # 1 GB among 4 peers in 1.5 s: b_bus = 2 * 1e9 * 3 / (4 * 1.5) = 1e9 B/s
    assert bus_bandwidth_from_time(1e9, 4, 1.5) == pytest.approx(1e9)
    assert allreduce_time(1e9, 4, 1e9) == pytest.approx(1.5)
    assert allreduce_time(1e9, 1, 1e9) == 0
    assert [round_up_pow2(s) for s in (1, 3, 4, 5, 1000, 1024)] == [1, 4, 4, 8, 1024, 1024]


def test_analytic_ring_model_by_hand():
    # 8 Gbps rated = 1e9 B/s, efficiency 0.5 -> 5e8 usable; n = 2, s = 1e8 B, alpha = 1 ms:
    # t = 2*1*1e-3 + 2*(1/2)*1e8/5e8 = 0.002 + 0.2 = 0.202 s -> b_bus = 2e8*1/(2*0.202)
    model = AnalyticCommModel(latency_s=1e-3, efficiency=0.5)
    assert model.bus_bandwidth(10**8, 2, LINK) == pytest.approx(1e8 / 0.202)
    assert LINK.rated_gbps * GBPS == 1e9
    assert model.bus_bandwidth(4, 2, LINK) < model.bus_bandwidth(2**20, 2, LINK)  # latency-bound
    assert math.isinf(model.bus_bandwidth(10, 1, LINK))
    with pytest.raises(ValueError):
        AnalyticCommModel(efficiency=0)


def test_two_layer_exchange_by_hand():
    # world 2: each transfer moves s bytes of bus work. t_bw = 1 s.
    # layer A (1e9 B) ready at 0.5 s: alone at 1 GB/s until 1.0 s -> 0.5e9 left.
    # layer B (1e9 B) ready at 1.0 s: two transfers share 1 GB/s -> 0.5 GB/s each;
    #   A finishes its 0.5e9 at 2.0 s; B has 0.5e9 left, alone again -> done at 2.5 s.
    layers = [LayerGrad(10**9, 1.0), LayerGrad(10**9, 0.5)]
    assert exchange_time(
        layers, backward_s=1.0, world=2, comm=FlatComm(), link=LINK
    ) == pytest.approx(2.5)
    t = simulate_iteration(0.3, 1.0, layers, world=2, comm=FlatComm(), link=LINK)
    assert t.iteration_s == pytest.approx(0.3 + max(1.0, 2.5))
    assert t.exchange_s == pytest.approx(2.5)
    # one process: nothing to exchange, t_iter = t_fw + t_bw (+ optimizer when asked)
    alone = simulate_iteration(
        0.3, 1.0, layers, world=1, comm=FlatComm(), link=LINK, optimizer_s=0.1
    )
    assert alone.iteration_s == pytest.approx(1.4)


def test_exchange_hidden_behind_a_long_backward():
    # a 1e8-byte layer ready at 0.1 of a 10 s backward finishes at 1.1 s: fully overlapped
    t = simulate_iteration(1.0, 10.0, [LayerGrad(10**8, 0.1)], world=2, comm=FlatComm(), link=LINK)
    assert t.exchange_s == pytest.approx(1.1) and t.iteration_s == pytest.approx(11.0)


def test_ddp_buckets_group_in_ready_order():
    mib = 2**20
    layers = [LayerGrad(mib // 2, 0.1), LayerGrad(mib, 0.2), LayerGrad(20 * mib, 0.5),
              LayerGrad(10 * mib, 0.7), LayerGrad(3 * mib, 0.9)]  # fmt: skip
    buckets = ddp_buckets(layers)
    # first bucket closes at >= 1 MiB (0.5 + 1), then 25 MiB buckets: (20 + 10), then the rest
    assert [(b.param_bytes // (mib // 2), b.ready_fraction) for b in buckets] == [
        (3, 0.2),
        (60, 0.7),
        (6, 0.9),
    ]
    assert sum(b.param_bytes for b in buckets) == sum(g.param_bytes for g in layers)


def test_ddp_bucket_copies_are_serial_time():
    # 3e9 gradient bytes copied in and out: each copy reads and writes them, 4 * 3e9 bytes
    # moved at 10 GB/s (read + write) = 1.2 s
    layers = [LayerGrad(10**9, 0.5), LayerGrad(2 * 10**9, 1.0)]
    assert ddp_copy_s(layers, 1e10) == pytest.approx(1.2)
    t = simulate_iteration(0.3, 1.0, layers, world=1, comm=FlatComm(), link=LINK, copy_s=1.2)
    assert t.iteration_s == pytest.approx(0.3 + 1.0 + 1.2) and t.optimizer_s == pytest.approx(1.2)


def test_exchange_after_backward_when_it_cannot_overlap():
    # both 1e9-byte layers start together after backward: two transfers share 1 GB/s and
    # end at 2.0 s, so t_iter = 0.3 + 1.0 + 2.0 (overlapped it would be 0.3 + 2.5)
    layers = [LayerGrad(10**9, 1.0), LayerGrad(10**9, 0.5)]
    t = simulate_iteration(
        0.3, 1.0, layers, world=2, comm=FlatComm(), link=LINK, exchange="ddp-serial"
    )
    assert t.exchange_s == pytest.approx(2.0) and t.iteration_s == pytest.approx(3.3)


def test_stragglers_take_the_max_over_vms():
    rng = np.random.default_rng(0)
    # no spread: the slowest type decides (heterogeneous configurations wait for it)
    assert straggler_compute([ComputeDraw(1.0, 0, 4), ComputeDraw(2.0, 0, 1)], 10, rng) == 2.0
    # with spread, the expected max of 16 normals exceeds the mean by ~1.77 sigma
    mean = straggler_compute([ComputeDraw(1.0, 0.05, 16)], 4000, np.random.default_rng(1))
    assert mean == pytest.approx(1 + 1.766 * 0.05, rel=0.01)
    assert straggler_compute(
        [ComputeDraw(1.0, 0.05, 1)], 4000, np.random.default_rng(1)
    ) == pytest.approx(1.0, rel=0.005)


def test_ps_model_by_hand():
    # model 1e8 B; worker: 0.5 s compute, link 1e9 B/s; one PS: link 1e9 B/s, 4 cores, 0.4 core-s/update
    # step = io 0 + transfer 2e8/1e9 = 0.2 + compute 0.5 + update 0.4/4 = 0.1 -> 0.8 s
    ps = PSSpec(count=1, update_core_s=0.4, cores=4, link_bytes_per_s=1e9)
    w = WorkerSpec(batch=32, compute_s=0.5, link_bytes_per_s=1e9)
    one = ps_throughput([w], ps, 10**8)
    assert one.worker_step_s == pytest.approx((0.8,)) and one.steps_per_s == pytest.approx(1.25)
    assert one.bottleneck == "workers" and one.samples_per_s == pytest.approx(40)
    assert one.ps_bytes_per_s_per_worker[0] == pytest.approx(2e8 * 1.25)
    # 8 workers would want 10 steps/s = 2e9 B/s through the PS; the cap is 0.95e9 / 2e8 = 4.75
    eight = ps_throughput([w] * 8, ps, 10**8)
    assert eight.bottleneck == "ps-network" and eight.steps_per_s == pytest.approx(4.75)
    # PS compute: 4 cores / 0.4 core-s = 10 steps/s caps 16 workers on a fat link
    fat = PSSpec(count=1, update_core_s=0.4, cores=4, link_bytes_per_s=1e12)
    assert ps_throughput([w] * 16, fat, 10**8).bottleneck == "ps-compute"


def test_ps_queueing_model_by_hand():
    # one PS, 1 core: 0.01 core-s per update + 1e-9 core-s per byte; 1e7 B model -> each step
    # moves 2e7 B: D_cpu = 0.01 + 0.02 = 0.03 s; link 1e9 B/s at 50%: D_net = 2e7 / 5e8 = 0.04 s
    ps = PSSpec(count=1, update_core_s=0.01, cores=1, link_bytes_per_s=1e9,
                cpu_s_per_byte=1e-9, network_efficiency=0.5)  # fmt: skip
    # worker: 0.1 s compute + 2e7 B over its own 2e10 B/s link = 0.001 -> Z = 0.101 s
    w = WorkerSpec(batch=10, compute_s=0.1, link_bytes_per_s=2e10)
    one = ps_throughput_queueing([w], ps, 10**7)
    assert one.steps_per_s == pytest.approx(1 / (0.101 + 0.03 + 0.04))
    # two workers (MVA): Q_cpu(1) = X1 * 0.03, Q_net(1) = X1 * 0.04, then
    # R_cpu = 0.03 (1 + Q_cpu), R_net = 0.04 (1 + Q_net), X2 = 2 / (Z + R_cpu + R_net)
    x1 = one.steps_per_s
    r_cpu, r_net = 0.03 * (1 + x1 * 0.03), 0.04 * (1 + x1 * 0.04)
    two = ps_throughput_queueing([w] * 2, ps, 10**7)
    assert two.steps_per_s == pytest.approx(2 / (0.101 + r_cpu + r_net))
    assert two.samples_per_s == pytest.approx(10 * two.steps_per_s)
    # many workers: the link (the larger demand) caps the job at 1 / 0.04 = 25 steps/s
    many = ps_throughput_queueing([w] * 200, ps, 10**7)
    assert many.steps_per_s == pytest.approx(25, rel=0.01) and many.bottleneck == "ps-network"
    assert one.bottleneck == "workers"
    # a free PS on a free link scales linearly: n / Z
    free = PSSpec(count=1, update_core_s=0.0, cores=1, link_bytes_per_s=float("inf"))
    assert ps_throughput_queueing([w] * 5, free, 10**7).steps_per_s == pytest.approx(5 / 0.101)
    assert predict_ps([w], ps, 10**7, PSModel.DLROVER) == ps_throughput([w], ps, 10**7)
    with pytest.raises(ValueError, match="at least one worker"):
        ps_throughput_queueing([], ps, 10**7)


def test_ps_shared_host_by_hand():
    # a 1-core PS at 0.02 core-s per update, no per-byte cost, on a host with 1.5 cores left
    # to the job, where the co-located workers spend 0.04 core-s per step:
    # D_host = (0.02 + 0.04) / 1.5 = 0.04 s, D_cpu = 0.02 s; worker Z = 0.1 s (fat links)
    ps = PSSpec(count=1, update_core_s=0.02, cores=1, link_bytes_per_s=float("inf"),
                host_cores=1.5, colocated_cpu_s_per_step=0.04)  # fmt: skip
    alone = PSSpec(count=1, update_core_s=0.02, cores=1, link_bytes_per_s=float("inf"))
    w = WorkerSpec(batch=1, compute_s=0.1, link_bytes_per_s=float("inf"))
    assert ps.host_demand_s(10**6) == pytest.approx(0.04) and alone.host_demand_s(10**6) == 0
    one = ps_throughput_queueing([w], ps, 10**6)
    assert one.steps_per_s == pytest.approx(1 / (0.1 + 0.02 + 0.04))
    # the host (the larger demand) caps the job at 1 / 0.04 = 25 steps/s, not the PS's 50
    many = ps_throughput_queueing([w] * 200, ps, 10**6)
    assert many.steps_per_s == pytest.approx(25, rel=0.01) and many.bottleneck == "host-cpu"
    assert ps_throughput_queueing([w] * 200, alone, 10**6).steps_per_s == pytest.approx(
        50, rel=0.01
    )
    # eq. 1: 200 workers want 200 / 0.12 steps/s; the host caps at 25, the PS at 50
    capped = ps_throughput([w] * 200, ps, 10**6)
    assert capped.bottleneck == "host-cpu" and capped.steps_per_s == pytest.approx(25)
    assert ps_throughput([w] * 200, alone, 10**6).steps_per_s == pytest.approx(50)
    with pytest.raises(ValueError, match="host_cores"):
        PSSpec(count=1, update_core_s=0.02, cores=1, link_bytes_per_s=1e9, host_cores=0)


def test_ps_worker_quota_by_hand():
    # a 1/6-core worker spending 24 ms of CPU per step (+0.6 ms per co-located worker): its
    # quota bounds its step at 0.024 / (1/6) = 0.144 s; a 0.25-core PS at 0.019 core-s per
    # update: D = 0.076 s; its unthrottled step is Z 0.024 + 0.076 = 0.1 s, hidden under 0.144
    ps = PSSpec(count=1, update_core_s=0.019, cores=0.25, link_bytes_per_s=float("inf"))
    w = WorkerSpec(batch=1, compute_s=0.024, link_bytes_per_s=float("inf"), cores=1 / 6,
                   cpu_s_per_step=0.024, cpu_growth_s=0.0006)  # fmt: skip
    assert w.cpu_s(6) == pytest.approx(0.027) and w.quota_step_s(1) == pytest.approx(0.144)
    one = ps_throughput_queueing([w], ps, 10**5)
    assert one.steps_per_s == pytest.approx(1 / 0.144) and one.bottleneck == "worker-cpu"
    # two: Q(1) = X1 * 0.076, R = 0.076 (1 + Q) = 0.116 s; Z + R = 0.140 < 0.0246 * 6 = 0.1476,
    # so the quotas would allow 2 / 0.1476 = 13.55 steps/s — more than the PS serves (13.16):
    # the quota bound may hide a worker's wait, not the PS's time
    x1 = 1 / 0.144
    two = ps_throughput_queueing([w] * 2, ps, 10**5)
    assert 0.024 + 0.076 * (1 + x1 * 0.076) < 0.1476
    assert two.steps_per_s == pytest.approx(1 / 0.076)
    # many: the PS (1 / 0.076 = 13.2 steps/s) takes over from the quotas
    many = ps_throughput_queueing([w] * 50, ps, 10**5)
    assert (
        many.steps_per_s == pytest.approx(1 / 0.076, rel=0.01) and many.bottleneck == "ps-compute"
    )
    # eq. 1, a 1-core PS (cap 1 / 0.019 = 52.6): 3 workers want 3 / (0.024 + 0.019) = 69.8
    # steps/s; their quotas (0.0252 s of CPU each) allow 3 / 0.1512 = 19.8
    core = PSSpec(count=1, update_core_s=0.019, cores=1, link_bytes_per_s=float("inf"))
    three = ps_throughput([w] * 3, core, 10**5)
    assert three.bottleneck == "worker-cpu" and three.steps_per_s == pytest.approx(3 / 0.1512)
    # unset quota: as before (no worker-cpu bound, the workers' CPU adds nothing to the host)
    free = WorkerSpec(batch=1, compute_s=0.024, link_bytes_per_s=float("inf"))
    assert ps_throughput_queueing([free], ps, 10**5).steps_per_s == pytest.approx(1 / 0.1)
    # on a shared host the workers' CPU per step joins its demand: (0.019 + 0.001 + 0.027) / 2
    host = PSSpec(count=1, update_core_s=0.019, cores=0.25, link_bytes_per_s=float("inf"),
                  host_cores=2.0, colocated_cpu_s_per_step=0.001)  # fmt: skip
    assert host.host_demand_s(10**5, w.cpu_s(6)) == pytest.approx(0.047 / 2)
    assert host.host_demand_s(10**5) == pytest.approx(0.020 / 2)
    with pytest.raises(ValueError, match="cores"):
        WorkerSpec(batch=1, compute_s=0.1, link_bytes_per_s=1e9, cores=0)


def test_ps_overlap_hides_the_push_and_the_update_not_the_link():
    # 3.4 MB of parameters: 6.8 MB a step over a 50 MB/s link, D_net = 0.136 s; the PS's CPU
    # 0.004 core-s per update on 0.5 core (D = 0.008 s); a worker's own step Z = 0.1 s
    ps = PSSpec(count=1, update_core_s=0.004, cores=0.5, link_bytes_per_s=50e6)
    serial = WorkerSpec(batch=1, compute_s=0.1, link_bytes_per_s=float("inf"))
    overlapped = WorkerSpec(batch=1, compute_s=0.1, link_bytes_per_s=float("inf"), overlap=True)
    # alone, a serial worker waits for both transfers and the update: 0.1 + 0.136 + 0.008;
    # overlapped, for the pull only (0.068): its push and the update run beside its compute
    assert ps_throughput_queueing([serial], ps, 3_400_000).steps_per_s == pytest.approx(
        1 / 0.244
    )
    assert ps_throughput_queueing([overlapped], ps, 3_400_000).steps_per_s == pytest.approx(
        1 / 0.168
    )
    # but the link carries both directions whoever waits: at most 1 / 0.136 = 7.35 steps/s
    for worker in (serial, overlapped):
        many = ps_throughput_queueing([worker] * 8, ps, 3_400_000)
        assert many.steps_per_s <= 1 / 0.136 + 1e-9 and many.bottleneck == "ps-network"
    assert ps_throughput_queueing([overlapped] * 2, ps, 3_400_000).steps_per_s == pytest.approx(
        1 / 0.136
    )
