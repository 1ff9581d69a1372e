"""The per-operation device model (perf/op_costs.py, perf/op_timing.py).

The central property: the same network written four ways
(benchmarks/plan/gpu_models.py) — PyTorch's own encoder layer, BERT's attention
module with explicit ``matmul``/``softmax`` and separate Q, K, V projections,
``F.scaled_dot_product_attention`` behind a fused QKV projection, and ``einsum`` — predicts within 5% of each other on every catalog GPU, since
the counts come from the operations dispatched, not from module types.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.plan.gpu_models import BERT_VOCAB, Bert, ExplicitBert  # noqa: E402

from profile_factory import make_profile, sample  # noqa: E402
from rightsize.core.catalog import Accelerator, builtin_accelerators  # noqa: E402
from rightsize.core.errors import SpecError, UnknownNameError  # noqa: E402
from rightsize.perf.device_model import GpuCompute  # noqa: E402
from rightsize.perf.op_costs import count_ops, kind_of, record_step  # noqa: E402
from rightsize.perf.op_sheet import Linear, OpKind  # noqa: E402
from rightsize.perf.op_timing import (  # noqa: E402
    K_HALF,
    OpEfficiencies,
    gemm_fraction,
    op_step_time,
    timed_rows,
    wave_fraction,
)
from rightsize.perf.precision import Precision  # noqa: E402
from rightsize.profiling.layers import ops_for_profile  # noqa: E402
from rightsize.profiling.profile import Profile  # noqa: E402


def catalog_gpus() -> list[Accelerator]:
    return list(builtin_accelerators())


WIDTH, HEADS, FF, SEQ, LAYERS = 768, 12, 3072, 128, 2  # BERT-base's layer, two of them


def _torch_bert(dropout: float) -> nn.Module:
    model = Bert(LAYERS, WIDTH, SEQ, pretrain=False)
    if dropout != 0.1:  # gpu_models' encoder uses BERT's 0.1 everywhere
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = dropout
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = dropout
    return model


def _sheet(model: nn.Module, device: str = "meta"):
    """Counted on meta tensors (shapes only, no arithmetic) unless ``device`` says otherwise."""
    torch.manual_seed(0)
    model.to(device).train()

    def step_at(n: int):
        ids = torch.randint(0, BERT_VOCAB, (n, SEQ), device=device)
        target = torch.randint(0, SEQ, (n,), device=device)
        return lambda: F.cross_entropy(model(ids)[..., 0], target)

    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return count_ops(model, step_at, 2), params


@pytest.fixture(scope="module")
def variants():
    """Each style at BERT's dropout (0.1: every attention runs PyTorch's math path) and
    without dropout, where scaled_dot_product_attention runs a fused kernel on real CPU
    tensors (meta tensors always take the math path)."""
    out = {}
    for dropout in (0.1, 0.0):
        torch.manual_seed(0)
        out["torch", dropout] = _sheet(_torch_bert(dropout))
        for style in ("explicit", "sdpa", "einsum"):
            fused = style == "sdpa" and dropout == 0.0
            hand = ExplicitBert(LAYERS, WIDTH, SEQ, False, style, dropout)
            out[style, dropout] = _sheet(hand, "cpu" if fused else "meta")
    return out


EFF = OpEfficiencies({"gemm_cuda": 0.6, "gemm_tensor": 0.5, "conv_cuda": 0.6,
                      "conv_tensor": 0.5}, memory=0.7, kernel_s=5e-6)  # fmt: skip


STYLES = ("torch", "explicit", "sdpa", "einsum")


def _spread(values) -> float:
    return max(values) / min(values) - 1


@pytest.mark.parametrize("dropout", [0.1, 0.0])
def test_one_network_written_four_ways_does_the_same_arithmetic_within_5_percent(variants,
                                                                                 dropout):  # fmt: skip
    """FLOPs and the matmuls' time (their shapes on each GPU's SMs, at each precision) agree
    within 5% however attention and the Q/K/V projection are written."""
    sheets = {style: variants[style, dropout] for style in STYLES}
    if dropout == 0.0:  # the fused kernel really was dispatched, and timed as attention
        assert any(op.kind is OpKind.ATTENTION for op in sheets["sdpa"][0].ops)
    assert _spread([sheet.flops(32) for sheet, _ in sheets.values()]) < 0.01
    for acc in catalog_gpus():
        for precision in (Precision.PYTORCH, Precision.TF32, Precision.AMP):
            for batch in (8, 32, 64):
                compute = {s: timed_rows(sheet, params, acc, precision, batch)
                           .compute_s(EFF.vector()).sum() for s, (sheet, params) in sheets.items()}  # fmt: skip
                assert _spread(compute.values()) < 0.05, (acc.name, precision, batch, compute)


def test_the_whole_step_is_the_same_within_5_percent_however_the_network_is_written(variants):
    """The whole step — memory-bound work and kernels included — agrees within 5% on every
    catalog GPU and precision (issue 40): eager PyTorch dispatches different work per form
    (score-matrix kernels, re-layout copies, a projection in three), which the counter
    counts as what it is (perf/op_canon.py). Written the same way (explicit matmuls or
    einsum) the step is the same to the last bit."""
    for dropout in (0.1, 0.0):
        sheets = {style: variants[style, dropout] for style in STYLES}
        for acc in catalog_gpus():
            for precision in (Precision.PYTORCH, Precision.TF32, Precision.AMP):
                for batch in (8, 32):
                    times = {s: op_step_time(sheet, params, acc, precision, batch, EFF).total_s
                             for s, (sheet, params) in sheets.items()}  # fmt: skip
                    assert times["explicit"] == pytest.approx(times["einsum"], rel=1e-9)
                    assert _spread(times.values()) < 0.05, (acc.name, precision, batch, times)


def test_as_dispatched_the_forms_differ_by_what_eager_pytorch_runs():
    """Uncanonicalised, the explicit form's score-matrix kernels and nn.MultiheadAttention's
    select_backward copies are there — what the canonical count folds."""
    def names(model, as_dispatched):
        torch.manual_seed(0)
        model.to("meta").train()

        def step_at(n):
            ids = torch.randint(0, BERT_VOCAB, (n, SEQ), device="meta")
            return lambda: model(ids)[..., 0].sum()

        return {op.name for op in count_ops(model, step_at, 2, as_dispatched).ops}

    explicit = ExplicitBert(1, WIDTH, SEQ, False, "explicit", 0.1)
    assert {"_softmax", "div", "bmm", "clone"} <= names(explicit, True)
    assert not {"_softmax", "bmm"} & names(explicit, False)
    assert "attention+mask+dropout" in names(explicit, False)
    packed = _torch_bert(0.1)
    assert "select_backward" in names(packed, True)


def test_fused_attention_counts_its_matmuls_and_its_operands_traffic():
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    records = record_step(lambda: F.scaled_dot_product_attention(q, q, q).sum())
    attention = [r for r in records if r.kind is OpKind.ATTENTION]
    assert [r.phase for r in attention] == ["forward", "backward"]
    # forward: QK^T and PV, 2 * heads * sq * skv * d each; backward twice that
    assert attention[0].flops == 2 * 2 * 8 * 16 * 16 * 8
    assert attention[1].flops == 2 * attention[0].flops
    assert attention[0].gemm == (8, 16, 16, 8)
    # Q, K, V and the output once each (the score matrix's traffic is op_timing's to add)
    assert attention[0].bytes == 4 * 8 * 16 * 8 * 4
    assert attention[1].bytes == 2 * attention[0].bytes  # and their gradients


def test_costs_are_lines_in_the_batch():
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def step_at(n):
        x = torch.randn(n, 32)
        return lambda: model(x).pow(2).mean()

    sheet = count_ops(model, step_at, 2)
    first = next(op for op in sheet.ops if op.name == "addmm")
    batch, m, n, k = first.gemm
    assert (m.fixed, m.per_sample, n.at(100), k.at(100)) == (0, 1, 64, 32)
    assert first.flops.at(10) == 2 * 10 * 32 * 64
    assert sheet.flops(10, "forward") == 2 * 10 * (32 * 64 + 64 * 4)
    # weight gradients reduce over the batch: K grows with it
    wgrad = [op for op in sheet.ops if op.phase == "backward" and op.gemm[3].per_sample == 1]
    assert len(wgrad) == 2
    assert all(p.grad is None for p in model.parameters())  # cleared after counting


def test_kinds_of_operations():
    assert kind_of("addmm") is OpKind.GEMM and kind_of("convolution_backward") is OpKind.CONV
    assert kind_of("native_layer_norm_backward") is OpKind.NORM
    assert kind_of("_safe_softmax") is OpKind.SOFTMAX and kind_of("embedding") is OpKind.EMBEDDING
    assert kind_of("sum") is OpKind.REDUCTION and kind_of("gelu") is OpKind.ELEMENTWISE
    assert kind_of("_scaled_dot_product_flash_attention_for_cpu") is OpKind.ATTENTION


def test_waves_and_tiles():
    assert wave_fraction(40, 80) == 0.5 and wave_fraction(81, 80) == 1.0  # partial waves shared
    assert wave_fraction(5, None) == 1.0  # a GPU without an SM count: no quantisation
    # a 64x64 gate fills one SM of 80; BERT's 768x3072 projection at 4096 tokens fills waves
    assert gemm_fraction(1, 64, 64, 64, 80) == pytest.approx(1 / 80 * 64 / (64 + K_HALF))
    assert gemm_fraction(1, 4096, 3072, 768, 80) > 0.9
    # a weight gradient's 36 output tiles split K=4096 over a B200's 148 SMs
    assert gemm_fraction(1, 768, 768, 4096, 148) == pytest.approx(996 / (996 + K_HALF), rel=1e-2)
    assert gemm_fraction(1, 768, 768, 128, 148) == pytest.approx(36 / 148 * 128 / (128 + K_HALF))
    small_s, large_s = (2 * 64**3 / gemm_fraction(1, 64, 64, 64, 80),
                        2 * 4096 * 3072 * 768 / gemm_fraction(1, 4096, 3072, 768, 80))
    assert small_s / (2 * 64**3) > 50 * large_s / (2 * 4096 * 3072 * 768)


def test_a_larger_gpu_is_faster_only_where_the_work_fills_it():
    small = Accelerator("S", 16, 10.0, 80.0, 1000.0, 40.0, sm_count=40)
    large = Accelerator("L", 16, 20.0, 160.0, 1000.0, 80.0, sm_count=80)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 1024))

    def step_at(n):
        x = torch.randn(n, 1024)
        return lambda: model(x).pow(2).mean()

    sheet = count_ops(model, step_at, 2)
    eff = OpEfficiencies(EFF.compute, 0.7, 0.0)

    def speedup(batch):
        times = [op_step_time(sheet, 0, acc, Precision.FP32, batch, eff).total_s
                 for acc in (small, large)]  # fmt: skip
        return times[0] / times[1]

    assert speedup(8192) > 1.8  # every SM busy: twice the peak, twice the speed
    assert speedup(64) < 1.3  # 64 rows: few tiles, and the memory traffic is the same


def test_profiles_carry_operations_and_old_ones_predict_as_before():
    old = make_profile([sample(1, 0.01, 0.02), sample(8, 0.05, 0.1)])
    acc = next(a for a in catalog_gpus() if a.name == "A100")
    per_class = GpuCompute.of(old, acc, Precision.TF32)
    fallback = GpuCompute.of(old, acc, Precision.TF32, method="per-op")
    assert fallback.method == "per-class"
    assert fallback.predict(8) == per_class.predict(8)
    with pytest.raises(UnknownNameError, match="choose one of: per-class, per-op"):
        GpuCompute.of(old, acc, Precision.TF32, method="magic")

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def step_at(n):
        x = torch.randn(n, 32)
        return lambda: model(x).pow(2).mean()

    ops = ops_for_profile(count_ops(model, step_at, 2))
    data = json.loads(old.to_json())
    data["op_costs"] = json.loads(json.dumps([op.model_dump() for op in ops]))
    new = Profile.from_dict(json.loads(json.dumps(data)))
    assert new.op_costs == ops
    per_op = GpuCompute.of(new, acc, Precision.TF32, method="per-op", op_efficiencies=EFF)
    assert per_op.method == "per-op"
    step = per_op.step(64)
    assert step.total_s > 0 and step.by_class_s["gemm"] > 0
    assert Linear(1.0, 2.0).at(3) == 7.0


def test_both_calibrations_write_back_their_shipped_files_unchanged():
    """Efficiencies and OpEfficiencies share their provenance (perf/fitted.py); each file
    keeps its keys and order."""
    from rightsize.perf.device_model import Efficiencies

    for cls in (Efficiencies, OpEfficiencies):
        text = resources.files("rightsize.perf").joinpath(cls.FILE).read_text()
        assert json.dumps(cls.shipped().to_dict(), indent=1) + "\n" == text
    with pytest.raises(SpecError, match="device efficiencies: missing or bad field"):
        Efficiencies.from_dict({"memory": 0.5})


def test_shipped_operation_efficiencies_load():
    shipped = OpEfficiencies.shipped()
    assert 0 < shipped.memory <= 1 and shipped.kernel_s > 0
    with pytest.raises(SpecError, match="not in"):
        OpEfficiencies.from_dict({**shipped.to_dict(), "memory": 1.5})


def _synthetic_rows(eff: OpEfficiencies):
    """Measurements the per-operation model itself made, on four made-up GPUs."""
    import dataclasses

    from rightsize.perf import op_calibration
    from rightsize.perf.calibration import Measurement
    from rightsize.perf.device_model import CostSheet

    gpus = [Accelerator("old", 12, 4.0, 4.0, 240.0, sm_count=13),
            Accelerator("mid", 16, 15.0, 120.0, 900.0, sm_count=80),
            Accelerator("new", 40, 20.0, 310.0, 1500.0, 155.0, sm_count=108),
            Accelerator("newer", 80, 60.0, 990.0, 3300.0, 495.0, sm_count=132)]  # fmt: skip
    nets = {"mlp": nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)),
            "cnn": nn.Sequential(nn.Conv2d(3, 32, 3), nn.BatchNorm2d(32), nn.ReLU(),
                                 nn.Conv2d(32, 64, 3), nn.Flatten(1))}  # fmt: skip
    inputs = {"mlp": (512,), "cnn": (3, 16, 16)}
    rows = []
    for name, net in nets.items():
        def step_at(n, net=net, name=name):
            x = torch.randn(n, *inputs[name])
            return lambda: net(x).pow(2).mean()

        ops = count_ops(net, step_at, 2)
        sheet = CostSheet((), sum(p.numel() * 4 for p in net.parameters()))
        for acc in gpus:
            for precision in (Precision.FP32, Precision.AMP):
                for batch in (32, 256):
                    m = Measurement(name, sheet, acc, precision, batch, 1.0, "synthetic", ops)
                    rows.append(dataclasses.replace(
                        m, samples_per_s=op_calibration.predicted_samples_per_s(m, eff)))  # fmt: skip
    return rows


def test_the_per_operation_fit_recovers_what_made_the_data():
    from rightsize.perf import calibration, op_calibration

    true = OpEfficiencies({"gemm_cuda": 0.7, "gemm_tensor": 0.4, "conv_cuda": 0.5,
                           "conv_tensor": 0.3}, memory=0.8, kernel_s=8e-6)  # fmt: skip
    rows = _synthetic_rows(true)
    fitted = op_calibration.fit(rows, prior_weight=1e-6, loss="linear")
    assert max(calibration.absolute_errors(rows, fitted, op_calibration.predicted_samples_per_s)) < 0.01
    held = calibration.leave_one_out(rows, "gpu", lambda r: op_calibration.fit(r, prior_weight=1e-6),
                                     op_calibration.predicted_samples_per_s)  # fmt: skip
    assert len(held.ratio) == 2 * len(held.ratio_own_batch) > 0  # two batches, one largest
    assert held.summary()["ratio_p90"] < 0.05


def test_pairs_as_a_user_compares_gpus_take_each_at_its_own_batch():
    from rightsize.perf import calibration

    rows = _synthetic_rows(EFF)
    same = list(calibration._gpu_pairs(rows, same_batch=True))
    own = list(calibration._gpu_pairs(rows, same_batch=False))
    # same batch: per model, precision and batch, the 6 pairs of 4 GPUs; own batch: each GPU
    # once per model and precision, at its largest batch
    assert len(same) == 2 * 2 * 2 * 6 and len(own) == 2 * 2 * 6
    assert all(a.batch == b.batch == 256 for a, b in own)


def test_a_recurrent_layer_is_one_fused_kernel_per_layer_and_direction():
    """The CPU runs an LSTM layer as one oneDNN kernel (as cuDNN does on a GPU), timed as
    its steps' GEMMs: 2 · T · B · 4H · (I + H) FLOPs forward, twice that backward."""
    lstm = nn.LSTM(16, 8, num_layers=2, batch_first=True)

    def step_at(n):
        x = torch.randn(n, 5, 16)
        return lambda: lstm(x)[0].pow(2).mean()

    sheet = count_ops(lstm, step_at, 2)
    rnn = [op for op in sheet.ops if op.kind is OpKind.RNN]
    assert sum(op.count for op in rnn if op.phase == "forward") == 2
    first = 2 * 5 * 10 * 32 * (16 + 8)  # layer 1 at batch 10
    second = 2 * 5 * 10 * 32 * (8 + 8)
    assert sheet.flops(10, "forward") == pytest.approx(first + second)
    assert sheet.flops(10, "backward") == pytest.approx(2 * (first + second))
    assert sorted(tuple(d.at(10) for d in op.gemm) for op in rnn if op.phase == "forward") == [
        (1, 10, 32, 16), (1, 10, 32, 24)]


def test_a_profile_counts_on_meta_tensors_what_real_ones_dispatch():
    from rightsize.profiling.layers import step_ops, step_ops_on

    class Feeder:
        def example_batch(self, n, device="cpu"):
            return (torch.randn(n, 3, 8, 8, device=device),), torch.randint(0, 4, (n,), device=device)

        def loss(self, model, batch):
            return F.cross_entropy(model(*batch[0]), batch[1])

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 6 * 6, 4))  # fmt: skip
    counted = step_ops(model, Feeder(), 2)
    assert counted == step_ops_on(model, Feeder(), 2, "cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())  # the model is untouched
    assert {op.kind for op in counted} >= {"conv", "gemm", "norm"}
