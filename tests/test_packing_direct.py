"""The direct step: a ragged fused MLP's gradients without the autograd engine, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from rightsize.core.errors import RightsizeError
from rightsize.packing.direct import DirectStep
from rightsize.packing.fused import fuse, resize, set_blocks
from rightsize.packing.pack import PackSettings
from rightsize.packing.ragged import KeptViews, mean_weights
from rightsize.workloads.models.mlp import mlp3

ACTIVATIONS = ["relu", "tanh", "sigmoid", "leaky_relu"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def models(activations, seed=0):
    torch.manual_seed(seed)
    return [mlp3(hidden=32, activation=a) for a in activations]


def autograd_grads(fused, x, targets, weight, sizes):
    """The autograd path's logits and gradients (what FusedGroup computes without DirectStep)."""
    set_blocks(fused, sizes)
    out = fused(x[: max(sizes)])
    (F.cross_entropy(out, targets, reduction="none") * weight).sum().backward()
    grads = [p.grad.clone() for p in fused.parameters()]
    for p in fused.parameters():
        p.grad = None
    set_blocks(fused, None)
    return out.detach(), grads


def rows(sizes):
    targets = torch.cat([torch.arange(b) % 10 for b in sizes])
    weight = mean_weights(sizes, "cpu")
    return targets, weight


@pytest.mark.parametrize("mix", [False, True], ids=["one-activation", "mixed-activations"])
def test_direct_gradients_equal_autograd_bit_for_bit(mix):
    activations = ACTIVATIONS if mix else ["tanh"] * 4
    fused = fuse(models(activations), torch.randn(4, 64), mix_activations=mix, ragged=True)
    step = DirectStep.compile(fused, 4, torch.randn(4, 64))
    assert step is not None
    sizes = [20, 65, 45, 30]  # ragged: every trial its own batch
    x = torch.randn(70, 64)
    targets, weight = rows(sizes)
    expected_out, expected = autograd_grads(fused, x, targets, weight, sizes)
    out = step.run(x, targets, weight, sizes)
    assert torch.equal(out, expected_out)
    for param, grad in zip(fused.parameters(), expected, strict=True):
        assert torch.equal(param.grad, grad)


def test_direct_step_follows_repacking():
    # drop trials 0 and 2 (relu, sigmoid): the mixed activations' runs change under the step
    fused = fuse(models(ACTIVATIONS), torch.randn(4, 64), mix_activations=True, ragged=True)
    step = DirectStep.compile(fused, 4, torch.randn(4, 64))
    resize(fused, torch.tensor([1, 3]))
    sizes = [50, 25]
    x = torch.randn(50, 64)
    targets, weight = rows(sizes)
    _, expected = autograd_grads(fused, x, targets, weight, sizes)
    step.run(x, targets, weight, sizes)
    for param, grad in zip(fused.parameters(), expected, strict=True):
        assert param.grad.shape[0] == 2 and torch.equal(param.grad, grad)


class _Residual(nn.Module):
    """Linear layers, but not a chain: the direct step must refuse it."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(64, 32), nn.Linear(32, 32), nn.Linear(32, 10)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.head(h + self.fc2(h))


class _Gelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.head = nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.act(self.fc1(x)))


@pytest.mark.parametrize("model", [_Residual, _Gelu], ids=["residual", "unsupported-activation"])
def test_models_it_cannot_follow_keep_autograd(model):
    torch.manual_seed(0)
    probe = torch.randn(4, 64)
    fused = fuse([model(), model()], probe, ragged=True)
    assert fused is not None  # fusable, so only the direct step refuses
    assert DirectStep.compile(fused, 2, probe) is None


def test_an_unknown_backward_is_refused():
    with pytest.raises(RightsizeError, match="backward"):
        PackSettings(batch_mode="ragged", backward="engine")


def test_kept_views_follow_in_place_updates_and_repacking():
    # The step keeps its outputs and per-trial views between steps: they must follow the
    # optimizer's in-place updates, and be dropped when repacking replaces the parameters.
    fused = fuse(models(ACTIVATIONS), torch.randn(4, 64), mix_activations=True, ragged=True)
    step = DirectStep.compile(fused, 4, torch.randn(4, 64))
    layouts = (
        ([20, 65, 45, 30], None),
        ([20, 65, 45, 30], torch.tensor([0, 1, 2, 3])),  # new parameters, the same sizes
        ([65, 30], torch.tensor([1, 3])),
    )
    for sizes, keep in layouts:
        if keep is not None:
            resize(fused, keep)
        targets, weight = rows(sizes)
        for _ in range(3):
            x = torch.randn(max(sizes), 64)
            expected_out, expected = autograd_grads(fused, x, targets, weight, sizes)
            out = step.run(x, targets, weight, sizes)
            assert torch.equal(out, expected_out)
            with torch.no_grad():
                for param, grad in zip(fused.parameters(), expected, strict=True):
                    assert torch.equal(param.grad, grad)
                    param.sub_(0.1 * param.grad)  # an optimizer's in-place update
                    param.grad = None


def test_kept_views_keep_only_what_they_own():
    weight = torch.randn(3, 4, 5)
    views = KeptViews([weight])
    assert views.unbind_t(weight) is views.unbind_t(weight)  # owned: kept
    fresh = torch.randn(6, 5)
    assert views.split(fresh, [2, 4]) is not views.split(fresh, [2, 4])  # not owned: anew
    out = views.empty("y", weight, (6, 4), fresh)
    assert views.empty("y", weight, (6, 4), fresh) is out  # an output is reused...
    assert views.split(out, [2, 4]) is views.split(out, [2, 4])  # ...and its views kept
    assert views.empty("y", weight, (7, 4), fresh) is not out  # a new shape: a new output
    assert views.empty("y", fresh, (6, 4), fresh) is not views.empty("y", fresh, (6, 4), fresh)
