"""The per-class layer counter charges each layer with the backward work it does (issue 40
item 2): a tensor computed once and fed to several layers — Transformer-XL's relative
position embedding, which needs no gradient, or a shared activation that does — must not
make a layer pay for the backward of the layers after it.

PyTorch's FlopCounterMode attributes backward work to a module from the moment its outputs'
gradients arrive until its inputs' gradients are complete; an input shared with later
layers is complete only after their backward, and one without gradients never is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.plan import gpu_models  # noqa: E402

from rightsize.perf.op_costs import count_ops  # noqa: E402
from rightsize.profiling.layers import layer_costs, trainable_layers  # noqa: E402

WIDTH, TOKENS, BATCH = 32, 6, 2


class SharedInput(nn.Module):
    """Blocks each adding a projection of one shared tensor: a fixed table (no gradient, as
    Transformer-XL's positions) or a learned one (its gradient gathered from every block)."""

    def __init__(self, blocks: int, learned: bool) -> None:
        super().__init__()
        self.source = nn.Linear(WIDTH, WIDTH) if learned else None
        self.register_buffer("table", torch.randn(TOKENS, WIDTH))
        self.blocks = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(blocks))
        self.projs = nn.ModuleList(nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shared = self.table if self.source is None else self.source(self.table)
        for block, proj in zip(self.blocks, self.projs, strict=True):
            x = torch.relu(block(x)) + proj(shared)
        return x


class _Feeder:
    def loss(self, model: nn.Module, batch) -> torch.Tensor:
        inputs, target = batch
        return ((model(*inputs) - target) ** 2).mean()


def _dispatched_backward_flops(model: nn.Module, feeder, batch) -> float:
    """Backward FLOPs per sample that the per-op counter (perf/op_costs.py) sees dispatched."""
    size = batch[1].shape[0]
    sheet = count_ops(model, lambda n: lambda: feeder.loss(model, batch), size)
    return sum(op.count * (op.flops.fixed / size + op.flops.per_sample)
               for op in sheet.ops if op.phase == "backward")  # fmt: skip


@pytest.mark.parametrize("learned", [False, True], ids=["fixed", "learned"])
def test_layers_backward_adds_up_to_what_is_dispatched(learned: bool) -> None:
    torch.manual_seed(0)
    model, feeder = SharedInput(4, learned), _Feeder()
    x = torch.randn(BATCH, TOKENS, WIDTH)
    batch = ((x,), torch.randn(BATCH, TOKENS, WIDTH))
    layers = trainable_layers(model)
    costs = layer_costs(model, feeder, layers, batch)
    by_name = dict(zip((layer.name for layer in layers), costs.layers, strict=True))
    # every FLOP is a layer's matmul: the layers' backward is the step's, as dispatched
    dispatched = _dispatched_backward_flops(model, feeder, batch)
    assert sum(c.backward_flops for c in costs.layers) == pytest.approx(dispatched, rel=0.02)
    assert costs.backward_flops == pytest.approx(dispatched, rel=0.02)
    # a projection of the fixed table computes its weights' gradient only (as much as its
    # forward); of the learned one also its input's (twice); the first block's input (the
    # batch) needs no gradient, the later blocks' do. The table is projected once a batch.
    matmul = 2 * TOKENS * WIDTH * WIDTH  # per sample
    for i in range(4):
        assert by_name[f"blocks.{i}"].forward_flops == pytest.approx(matmul)
        assert by_name[f"blocks.{i}"].backward_flops == pytest.approx(matmul * (1 if i == 0 else 2))
        assert by_name[f"projs.{i}"].forward_flops == pytest.approx(matmul / BATCH)
        assert by_name[f"projs.{i}"].backward_flops == pytest.approx(
            matmul / BATCH * (2 if learned else 1))


def test_transformer_xl_layers_are_charged_with_their_own_backward() -> None:
    """DLE's Transformer-XL base on meta tensors: its sixteen position projections (``r_net``,
    fed the one relative position embedding) were charged 512 GFLOP of backward per sample
    against 75 dispatched in all."""
    built = gpu_models.transformer_xl(gpu_models.TXL_BASE)
    model = built.model.train().to("meta")

    def batch_of(n: int):
        inputs, target = built.example_batch(n)
        return tuple(t.to("meta") for t in inputs), target.to("meta")

    layers = trainable_layers(model)
    costs = layer_costs(model, built, layers, batch_of(2))
    sheet = count_ops(model, lambda n: (lambda batch: lambda: built.loss(model, batch))(batch_of(n)))
    dispatched = sum(op.count * (op.flops.fixed / 2 + op.flops.per_sample)
                     for op in sheet.ops if op.phase == "backward")  # fmt: skip
    assert costs.backward_flops == pytest.approx(dispatched, rel=0.02)
    layers_backward = sum(c.backward_flops for c in costs.layers)
    assert layers_backward <= costs.backward_flops
    # a layer's backward is its weights' gradient and, where its input needs one, its input's:
    # each as much as its forward; the position projections' input (the embedding) needs none
    for layer, cost in zip(layers, costs.layers, strict=True):
        if layer.name.endswith("r_net"):
            assert cost.backward_flops == pytest.approx(cost.forward_flops), layer.name
        else:
            assert cost.backward_flops <= 2 * cost.forward_flops * 1.001, layer.name
