"""Counting each operation as what it is, however eager PyTorch spelled it (perf/op_canon.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rightsize.core.catalog import find_accelerator
from rightsize.perf.op_canon import canonical
from rightsize.perf.op_costs import count_ops, record_step
from rightsize.perf.op_sheet import OpKind, OpRecord
from rightsize.perf.op_timing import OpEfficiencies, op_step_time
from rightsize.perf.precision import Precision

EFF = OpEfficiencies({"gemm_cuda": 0.6, "gemm_tensor": 0.5, "conv_cuda": 0.6,
                      "conv_tensor": 0.5}, memory=0.7, kernel_s=5e-6)  # fmt: skip


def _attention_by_hand(q, k, v, p_drop: float):
    scores = torch.matmul(q, k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    return torch.matmul(F.dropout(scores.softmax(-1), p_drop), v)


def test_attention_written_out_is_the_fused_kernel_record():
    """QK^T, scaling, softmax, dropout and PV become one attention per phase, the record the
    fused kernel gives: the same FLOPs, shape and traffic (Q, K, V, output; gradients)."""
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    by_hand = record_step(lambda: _attention_by_hand(q, q, q, 0.1).sum())
    fused = record_step(lambda: F.scaled_dot_product_attention(q, q, q).sum())
    for records in (by_hand, fused):
        attention = [r for r in records if r.kind is OpKind.ATTENTION]
        assert [r.phase for r in attention] == ["forward", "backward"]
        assert not any(r.kind is OpKind.SOFTMAX or r.name == "bmm" for r in records)
    pick = [[(r.flops, r.bytes, r.gemm) for r in rs if r.kind is OpKind.ATTENTION]
            for rs in (by_hand, fused)]  # fmt: skip
    assert pick[0] == pick[1]
    # what the scores went through is in the name, which op_timing reads
    assert {r.name for r in by_hand if r.kind is OpKind.ATTENTION} == {"attention+dropout"}
    assert {r.name for r in fused if r.kind is OpKind.ATTENTION} == {"attention"}


def test_a_masked_dropped_out_attention_is_named_alike_however_written():
    q = torch.randn(2, 4, 16, 8, device="meta", requires_grad=True)
    mask = torch.zeros(2, 1, 1, 16, device="meta")

    def by_hand():
        scores = torch.matmul(q, q.transpose(-1, -2)) / 8**0.5 + mask
        return torch.matmul(F.dropout(scores.softmax(-1), 0.1), q).sum()

    def sdpa():
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask, dropout_p=0.1).sum()

    for step in (by_hand, sdpa):
        names = {r.name for r in record_step(step) if r.kind is OpKind.ATTENTION}
        assert names == {"attention+mask+dropout"}


def test_a_copy_for_a_gemm_is_layout_and_a_real_concatenation_is_not():
    a = torch.randn(4, 8, 16, requires_grad=True)
    w = torch.randn(8, 8, requires_grad=True)

    def step():
        x = a.transpose(0, 1).contiguous().view(8, 64)  # re-laid out for the matmul
        joined = torch.cat([a, a], dim=2)  # DenseNet's concatenation: real traffic
        return (w @ x).sum() + joined.sum()

    records = record_step(step)
    by_name = {r.name: r for r in records if r.phase == "forward"}
    assert by_name["clone"].kind is OpKind.LAYOUT and by_name["clone"].bytes == 0
    assert by_name["cat"].kind is OpKind.ELEMENTWISE and by_name["cat"].bytes > 0


def _sheet(model: nn.Module):
    def step_at(n):
        x = torch.randn(n, 64, 32)
        return lambda: sum(t.pow(2).mean() for t in model(x))

    return count_ops(model, step_at, 2)


class Apart(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(32, 32) for _ in range(3))

    def forward(self, x):
        return self.q(x), self.k(x), self.v(x)


class Fused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96)

    def forward(self, x):
        return self.qkv(x).chunk(3, dim=-1)


def test_projections_apart_count_as_one_fused_projection():
    """Three GEMMs reading one activation are one GEMM of their summed width; their weight
    gradients, input gradients (with the adds accumulating them) and bias sums likewise."""
    apart, fused = _sheet(Apart()), _sheet(Fused())
    gemms = [{(op.phase, tuple(d.at(10) for d in op.gemm)) for op in sheet.ops
              if op.kind is OpKind.GEMM} for sheet in (apart, fused)]  # fmt: skip
    assert gemms[0] == gemms[1]
    assert (("forward", (1.0, 640.0, 96.0, 32.0))) in gemms[0]
    assert apart.flops(10) == pytest.approx(fused.flops(10))
    acc = find_accelerator("A100")
    times = [op_step_time(sheet, 0, acc, Precision.TF32, 10, EFF).total_s for sheet in (apart, fused)]
    assert times[0] == pytest.approx(times[1], rel=0.05)


def test_a_bias_added_apart_is_the_gemms_epilogue():
    records = [
        OpRecord("mm", OpKind.GEMM, "forward", 1.0, 1.0, (1, 4, 4, 4), ((1, 64, 2), (2, 64, 2)), (3,)),
        OpRecord("add", OpKind.ELEMENTWISE, "forward", 0.0, 1.0, reads=((3, 64, 2), (4, 16, 1)),
                 writes=(5,)),
        OpRecord("add", OpKind.ELEMENTWISE, "forward", 0.0, 1.0, reads=((5, 64, 2), (1, 64, 2)),
                 writes=(6,)),
    ]  # fmt: skip
    assert [r.name for r in canonical(records)] == ["mm", "add"]
