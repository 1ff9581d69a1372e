"""The precision-aware device model (perf/precision.py, perf/device_model.py) by hand."""

from __future__ import annotations

import json

import pytest
from torch import nn

from profile_factory import make_profile, sample
from rightsize.core.catalog import Accelerator, find_accelerator
from rightsize.core.errors import SpecError, UnknownNameError
from rightsize.perf.device_model import (
    OPTIMIZER_BYTES_PER_PARAM_BYTE,
    TENSOR_CLASSES,
    CostSheet,
    Efficiencies,
    GpuCompute,
    LayerCost,
    step_time,
)
from rightsize.perf.precision import (
    OpClass,
    Precision,
    op_class_for,
    peak_flops_per_s,
    runs_on_tensor_cores,
)
from rightsize.profiling.layers import op_class_of, trainable_layers

# A made-up Ampere GPU with round numbers: 10 TFLOP/s fp32, 40 TF32, 80 fp16, 1 TB/s
AMPERE = Accelerator("X", 16, 10.0, 80.0, 1000.0, tf32_tflops=40.0)
VOLTA = Accelerator("V", 16, 10.0, 80.0, 1000.0)  # tensor cores, no TF32
ALL_HALF = Efficiencies({c: 1.0 for c in TENSOR_CLASSES}, {c: 0.5 for c in TENSOR_CLASSES},
                        memory=0.5, kernel_s=0.0)  # fmt: skip


@pytest.mark.parametrize(("acc", "precision", "op_class", "tflops"), [
    (AMPERE, Precision.FP32, OpClass.CONV, 10),
    (AMPERE, Precision.TF32, OpClass.MATMUL, 40),
    (AMPERE, Precision.AMP, OpClass.ATTENTION, 80),
    (AMPERE, Precision.PYTORCH, OpClass.CONV, 40),  # cuDNN may use TF32 by default
    (AMPERE, Precision.PYTORCH, OpClass.MATMUL, 10),  # matmuls may not (since PyTorch 1.12)
    (VOLTA, Precision.TF32, OpClass.CONV, 10),  # no TF32 before Ampere: fp32
    (VOLTA, Precision.AMP, OpClass.CONV, 80),
    (AMPERE, Precision.AMP, OpClass.NORM, 10),  # memory-bound classes stay on CUDA cores
])  # fmt: skip
def test_peak_per_precision_and_class(acc, precision, op_class, tflops):
    assert peak_flops_per_s(acc, precision, op_class) == tflops * 1e12
    assert runs_on_tensor_cores(acc, precision, op_class) == (tflops > 10)


def test_module_types_map_to_classes_and_old_profiles_fall_back():
    assert op_class_of(nn.Conv2d(1, 1, 3)) is OpClass.CONV
    assert op_class_of(nn.Linear(2, 2)) is OpClass.MATMUL
    assert op_class_of(nn.LSTM(2, 2)) is OpClass.MATMUL
    assert op_class_of(nn.BatchNorm2d(2)) is OpClass.NORM
    assert op_class_of(nn.EmbeddingBag(5, 2)) is OpClass.EMBEDDING
    assert op_class_of(nn.MultiheadAttention(4, 2)) is OpClass.ATTENTION
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 2))
    assert [layer.op_class for layer in trainable_layers(net)] == [
        OpClass.CONV, OpClass.NORM, OpClass.MATMUL]  # fmt: skip
    assert op_class_for(None, 10.0) is OpClass.MATMUL and op_class_for(None, 0) is OpClass.NORM
    assert op_class_for("conv", 0) is OpClass.CONV


def test_step_time_by_hand():
    # one conv: 1 GFLOP forward, 2 backward per sample, 1 MB out per sample, 4 MB weights
    conv = LayerCost(OpClass.CONV, 1e9, 2e9, 1e6, 4e6)
    sheet = CostSheet.of_layers([conv], forward_flops=1e9, backward_flops=2e9,
                                activation_bytes_per_sample=2e6)  # fmt: skip
    # batch 10 in fp32: conv compute 1e10 / (10e12 * 1.0) = 1 ms;
    # memory (4e6 + 2*1e6*10) / (1e12 * 0.5) = 48 us -> 1 ms.
    # the element-wise rest moves 2*2e6*10 = 4e7 B / 5e11 = 80 us forward.
    step = step_time(sheet, AMPERE, Precision.FP32, 10, ALL_HALF)
    assert step.forward_s == pytest.approx(1e-3 + 80e-6)
    # backward: conv 2e10 / 1e13 = 2 ms; rest 3*2e6*10 = 6e7 / 5e11 = 120 us
    assert step.backward_s == pytest.approx(2e-3 + 120e-6)
    assert step.optimizer_s == pytest.approx(OPTIMIZER_BYTES_PER_PARAM_BYTE * 4e6 / 5e11)
    # TF32: 40 TFLOP/s at half efficiency = 20: conv 0.5 ms forward, 1 ms backward
    tf32 = step_time(sheet, AMPERE, Precision.TF32, 10, ALL_HALF)
    assert tf32.forward_s == pytest.approx(0.5e-3 + 80e-6)
    # AMP halves the activation bytes: the rest now takes 40 us forward
    amp = step_time(sheet, AMPERE, Precision.AMP, 10, ALL_HALF)
    assert amp.forward_s == pytest.approx(max(1e10 / 40e12, (4e6 + 1e7) / 5e11) + 40e-6)
    assert set(step.by_class_s) == {"conv", "attention", "norm", "kernels", "optimizer"}
    with pytest.raises(SpecError, match="batch must be positive"):
        step_time(sheet, AMPERE, Precision.FP32, 0, ALL_HALF)


def test_efficiencies_round_trip_and_validation():
    data = ALL_HALF.to_dict()
    assert Efficiencies.from_dict(json.loads(json.dumps(data))) == ALL_HALF
    data["memory"] = 1.5
    with pytest.raises(SpecError, match="memory = 1.5 is not in"):
        Efficiencies.from_dict(data)
    del data["tensor_core"]["conv"]
    with pytest.raises(SpecError, match="missing or bad field"):
        Efficiencies.from_dict(data)
    shipped = Efficiencies.shipped()  # the package's own file loads and is valid
    assert 0 < shipped.memory <= 1 and shipped.kernel_s > 0


def test_gpu_compute_from_a_profile_and_its_interval():
    profile = make_profile([sample(1, 0.01, 0.02), sample(8, 0.05, 0.1)])
    eff = Efficiencies(ALL_HALF.cuda_core, ALL_HALF.tensor_core, 0.5, 0.0, log_spread=0.1)
    compute = GpuCompute.of(profile, AMPERE, Precision.FP32, eff)
    # the profile's two layers predate op classes: they do FLOPs, so matmuls
    assert [c.op_class for c in compute.sheet.layers[:2]] == [OpClass.MATMUL] * 2
    time = compute.predict(8)
    assert time.total_s == pytest.approx(time.forward_s + time.backward_s)
    low, high = compute.interval(1.0)
    assert low == pytest.approx(1 / 1.10517, rel=1e-4) and high == pytest.approx(1.10517, rel=1e-4)


def test_accelerators_know_tf32_only_from_ampere():
    assert find_accelerator("a100").tf32_tflops == 156
    assert find_accelerator("V100").tf32_tflops is None
    with pytest.raises(UnknownNameError, match="did you mean 'H100'"):
        find_accelerator("H1000")


class _Feeder:
    """What layer_costs needs of a workload: a loss over (inputs, target)."""

    def loss(self, model, batch):
        inputs, target = batch
        out = model(*inputs)
        out = out[0] if isinstance(out, tuple) else out
        return (out.float().mean() - target.float().mean()) ** 2


def test_nested_layers_are_counted_once_and_rnns_are_counted():
    import torch

    from rightsize.profiling.layers import layer_costs, rnn_flops

    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 2, batch_first=True)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.ff = attention, nn.Linear(16, 16)

        def forward(self, x):
            return self.ff(self.attn(x, x, x, need_weights=False)[0])

    block = Block()
    layers = trainable_layers(block)
    assert [layer.name for layer in layers] == ["attn", "attn.out_proj", "ff"]
    x = torch.randn(2, 5, 16)
    costs = layer_costs(block, _Feeder(), layers, ((x,), torch.zeros(2)))
    # every FLOP the counter saw belongs to exactly one layer: the layers add up to the model
    assert sum(c.forward_flops for c in costs.layers) == pytest.approx(costs.forward_flops)
    assert sum(c.backward_flops for c in costs.layers) == pytest.approx(costs.backward_flops)
    # one LSTM layer of 8 over inputs of 4, 3 steps, 2 samples: 4 gates x 2 x 8 x (4 + 8) per
    # step and sample = 768; x 3 x 2 = 4608 (the counter sees none of it on CPU)
    lstm = nn.LSTM(4, 8, batch_first=True)
    assert rnn_flops(lstm, torch.randn(2, 3, 4)) == 4608
    net = nn.Sequential(lstm)
    costs = layer_costs(net, _Feeder(), trainable_layers(net),
                        ((torch.randn(2, 3, 4),), torch.zeros(2)))  # fmt: skip
    assert costs.layers[0].forward_flops == pytest.approx(4608 / 2)  # per sample
    assert costs.layers[0].backward_flops == pytest.approx(2 * 4608 / 2)
    assert costs.forward_flops == pytest.approx(4608 / 2)
