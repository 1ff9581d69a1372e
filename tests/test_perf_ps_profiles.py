"""PS cost profiles (perf/ps_profiles.py) and the RPC-layer ceiling they add to the PS models."""

from __future__ import annotations

import statistics

import pytest

from rightsize.perf.ps import (
    PS_CPU_S_PER_BYTE,
    PS_NETWORK_EFFICIENCY,
    PSModel,
    PSSpec,
    WorkerSpec,
    predict_ps,
)
from rightsize.perf.ps_profiles import (
    PROFILES,
    RIGHTSIZE,
    TENSORFLOW1_GRPC,
    TF1_GRPC_BYTES_PER_S,
    TF1_GRPC_BYTES_PER_S_RANGE,
    TF1_GRPC_CPU_S_PER_TENSOR,
    TF1_GRPC_CPU_S_PER_TENSOR_RANGE,
    profile,
    tf1_tensors_per_step,
)

WORKER = WorkerSpec(batch=128, compute_s=0.03, link_bytes_per_s=2e9)
MODEL_BYTES = 1_867_624  # ResNet-32 on CIFAR, fp32


def test_the_rightsize_profile_is_the_ps_every_plan_used_before_profiles():
    before = PSSpec(count=1, update_core_s=8e-4, cores=4, link_bytes_per_s=1e9,
                    cpu_s_per_byte=PS_CPU_S_PER_BYTE, network_efficiency=PS_NETWORK_EFFICIENCY)  # fmt: skip
    now = RIGHTSIZE.spec(update_core_s=8e-4, cores=4, link_bytes_per_s=1e9, tensors_per_step=269)
    assert now == before
    for kind in PSModel:
        for n in (1, 4, 8):
            assert predict_ps([WORKER] * n, now, MODEL_BYTES, kind) == predict_ps(
                [WORKER] * n, before, MODEL_BYTES, kind
            )


def test_profiles_are_found_by_name_and_an_unknown_one_names_the_known():
    assert profile("tensorflow1-grpc") is TENSORFLOW1_GRPC
    assert set(PROFILES) == {"rightsize", "tensorflow1-grpc"}
    with pytest.raises(ValueError, match="rightsize, tensorflow1-grpc"):
        profile("tensorflow2")


def test_tensorflow_moves_each_variable_and_its_gradient_as_its_own_tensor():
    # ResNet-32: 101 trainable tensors, 33 batch norms' moving mean and variance
    assert tf1_tensors_per_step(101, 66) == 2 * 101 + 66 + 1
    spec = TENSORFLOW1_GRPC.spec(update_core_s=8e-4, cores=4, link_bytes_per_s=1e9,
                                 tensors_per_step=269)  # fmt: skip
    assert spec.update_core_s == pytest.approx(8e-4 + 269 * TF1_GRPC_CPU_S_PER_TENSOR)
    assert spec.transfer_bytes_per_s == TF1_GRPC_BYTES_PER_S and spec.cpu_s_per_byte == 0
    with pytest.raises(ValueError, match="tensors_per_step"):
        TENSORFLOW1_GRPC.spec(update_core_s=0, cores=4, link_bytes_per_s=1e9, tensors_per_step=-1)


def test_the_tensorflow_constants_are_their_sources_arithmetic():
    # tensorflow/tensorflow#6116: 800, 500 and 288 MB/s after the gRPC upgrade; the median
    assert TF1_GRPC_BYTES_PER_S == statistics.median([800e6, 500e6, 288e6])
    assert TF1_GRPC_BYTES_PER_S_RANGE == (288e6, 800e6)
    # tensorflow/tensorflow#7466 rpcbench: /30/5 - /30/2 over 3 stages of 871 remote recvs; the
    # 60-hop chain /1/60 - /1/1 over 59 hops (ns)
    assert TF1_GRPC_CPU_S_PER_TENSOR == pytest.approx((20_620_620 - 6_168_890) / (3 * 871) * 1e-9,
                                                      rel=0.01)  # fmt: skip
    assert TF1_GRPC_CPU_S_PER_TENSOR_RANGE[1] == pytest.approx((5_010_130 - 125_990) / 59 * 1e-9,
                                                               rel=0.01)  # fmt: skip


def test_the_rpc_ceiling_caps_both_models_and_is_named_the_bottleneck():
    ps = PSSpec(count=1, update_core_s=0.0, cores=4, link_bytes_per_s=float("inf"),
                transfer_bytes_per_s=100e6)  # fmt: skip
    ceiling = 100e6 / (2 * MODEL_BYTES)
    for kind in PSModel:
        many = predict_ps([WORKER] * 64, ps, MODEL_BYTES, kind)
        assert many.bottleneck == "ps-transfer"
        assert many.steps_per_s == pytest.approx(ceiling, rel=0.02)
        assert many.steps_per_s <= ceiling * (1 + 1e-9)
    # one worker waits for its bytes through the ceiling: slower than without it
    free = PSSpec(count=1, update_core_s=0.0, cores=4, link_bytes_per_s=float("inf"))
    for kind in PSModel:
        assert (predict_ps([WORKER], ps, MODEL_BYTES, kind).steps_per_s
                < predict_ps([WORKER], free, MODEL_BYTES, kind).steps_per_s)  # fmt: skip


def test_two_ps_processes_double_the_rpc_ceiling():
    one, two = (PSSpec(count=c, update_core_s=0.0, cores=4, link_bytes_per_s=float("inf"),
                       transfer_bytes_per_s=100e6) for c in (1, 2))  # fmt: skip
    many = [WORKER] * 64
    assert predict_ps(many, two, MODEL_BYTES).steps_per_s == pytest.approx(
        2 * predict_ps(many, one, MODEL_BYTES).steps_per_s, rel=0.02
    )


def test_an_overlapping_worker_waits_only_for_the_pull_through_the_ceiling():
    ps = PSSpec(count=1, update_core_s=0.0, cores=4, link_bytes_per_s=float("inf"),
                transfer_bytes_per_s=100e6)  # fmt: skip
    overlapped = WorkerSpec(batch=128, compute_s=0.03, link_bytes_per_s=float("inf"), overlap=True)
    serial = WorkerSpec(batch=128, compute_s=0.03, link_bytes_per_s=float("inf"))
    alone = predict_ps([overlapped], ps, MODEL_BYTES)
    assert alone.steps_per_s == pytest.approx(1 / (0.03 + MODEL_BYTES / 100e6), rel=1e-6)
    assert alone.steps_per_s > predict_ps([serial], ps, MODEL_BYTES).steps_per_s
    # the push still passes the ceiling: no more steps than it allows
    assert predict_ps([overlapped] * 64, ps, MODEL_BYTES).steps_per_s <= 100e6 / (2 * MODEL_BYTES) * (
        1 + 1e-9
    )


def test_a_bounded_profile_keeps_the_framework_and_names_its_end():
    slow = TENSORFLOW1_GRPC.bounded(288e6, 83e-6)
    assert slow.transfer_bytes_per_s == 288e6 and slow.cpu_s_per_tensor == 83e-6
    assert slow.name == "tensorflow1-grpc@288MB/s,83.0us"
    assert slow.network_efficiency == TENSORFLOW1_GRPC.network_efficiency
    with pytest.raises(ValueError, match="transfer_bytes_per_s"):
        PSSpec(count=1, update_core_s=0, cores=1, link_bytes_per_s=1e9, transfer_bytes_per_s=0)
