"""A fused ragged MLP's training step without the autograd engine (beyond the paper).

In the ragged layout (:mod:`rightsize.packing.ragged`) a fused group of n
MLP trials makes about 15 small ATen calls per trial and step, and the
autograd engine adds its own work around each: recording the graph, a
Python ``backward`` per layer, gradient bookkeeping. For a chain of ``Linear``
layers and elementwise activations with a cross-entropy loss the backward
pass is short enough to write out. :class:`DirectStep` does that and calls
exactly the kernels autograd would call, on the same operands:

- linear layers: :func:`~rightsize.packing.ragged.linear_forward` and
  :func:`~rightsize.packing.ragged.linear_backward`, the very functions the
  autograd path runs;
- activations: the backward kernel of each (``threshold_backward`` for ReLU,
  ``tanh_backward``, ``sigmoid_backward``, ``leaky_relu_backward``) on what
  autograd saves (the output, or LeakyReLU's input);
- the loss: per-row cross entropy weighted by ``1/b`` per trial (its mean),
  differentiated as ``nll_loss_backward`` then ``_log_softmax_backward_data``.

So the gradients are bit for bit the autograd path's, and through it each
trial's alone. :meth:`DirectStep.compile` accepts only models it can follow
(a flatten of the input, then linear layers and the activations above in a
chain, ending in a linear layer) and then checks itself against autograd on
the probe batch: any difference in the output or any gradient bit and the
group keeps the autograd path, so this can never change a result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from rightsize.packing.fused import StackedActivation, StackedLinear, call_order, set_blocks
from rightsize.packing.ragged import (
    FreshViews,
    KeptViews,
    linear_backward,
    linear_forward,
    mean_weights,
)

aten = torch.ops.aten
IGNORE_INDEX = -100  # F.cross_entropy's default
NO_REDUCTION = 0  # ATen's Reduction::None


# Each kernel writes into ``out``, a slice of the layer's result: a group whose trials
# differ in activation then needs no concatenation of its runs.
def _relu(x, _module, out):
    torch.clamp_min(x, 0, out=out)  # what torch.relu computes


def _relu_backward(grad, _x, y, _module, out):
    aten.threshold_backward.grad_input(grad, y, 0, grad_input=out)


def _tanh(x, _module, out):
    torch.tanh(x, out=out)


def _tanh_backward(grad, _x, y, _module, out):
    aten.tanh_backward.grad_input(grad, y, grad_input=out)


def _sigmoid(x, _module, out):
    torch.sigmoid(x, out=out)


def _sigmoid_backward(grad, _x, y, _module, out):
    aten.sigmoid_backward.grad_input(grad, y, grad_input=out)


def _leaky_relu(x, module, out):
    torch._C._nn.leaky_relu(x, module.negative_slope, out=out)


def _leaky_relu_backward(grad, x, _y, module, out):
    aten.leaky_relu_backward.grad_input(grad, x, module.negative_slope, False, grad_input=out)


#: Activation -> (forward(input, module, out), backward(grad, input, output, module, out)):
#: the kernels autograd runs for it.
ACTIVATION_KERNELS: dict[type, tuple[Callable, Callable]] = {
    nn.ReLU: (_relu, _relu_backward),
    nn.Tanh: (_tanh, _tanh_backward),
    nn.Sigmoid: (_sigmoid, _sigmoid_backward),
    nn.LeakyReLU: (_leaky_relu, _leaky_relu_backward),
}


@dataclass(frozen=True)
class _Linear:
    module: StackedLinear


@dataclass(frozen=True)
class _Activation:
    module: nn.Module  # one activation for every trial, or a StackedActivation

    def runs(self, trials: int) -> list[tuple[int, int, nn.Module]]:
        """(first trial, end trial, activation); read each step: repacking changes the runs."""
        if isinstance(self.module, StackedActivation):
            return self.module.runs
        return [(0, trials, self.module)]


class DirectStep:
    """Forward, loss and backward of a fused ragged MLP group, setting each parameter's ``grad``.

    Build with :meth:`compile`, which returns None for a model it cannot follow exactly.
    """

    def __init__(self, flatten: bool, layers: Sequence[_Linear | _Activation]) -> None:
        self._flatten = flatten
        self._layers = list(layers)
        self._layout: tuple | None = None  # what self._views were kept for
        self._views: FreshViews = FreshViews()

    @classmethod
    def compile(cls, fused: nn.Module, trials: int, probe: torch.Tensor) -> DirectStep | None:
        """The direct step of ``fused`` (n = ``trials`` trials), or None.

        ``probe`` is a small input batch: the step is checked against the autograd
        path on it, output and every gradient bit for bit.
        """
        rows = [len(probe)] * trials
        set_blocks(fused, rows)
        try:
            step = cls._follow(fused, probe)
            return step if step is not None and step._agrees(fused, probe, rows) else None
        finally:
            set_blocks(fused, None)

    @classmethod
    def _follow(cls, fused: nn.Module, probe: torch.Tensor) -> DirectStep | None:
        order = call_order(fused, probe)
        if order is None:
            return None
        flatten, layers = False, []
        for name in order:
            module = fused.get_submodule(name)
            if isinstance(module, nn.Flatten) and not layers:
                flatten = (module.start_dim, module.end_dim) == (1, -1)
                if not flatten:
                    return None
            elif isinstance(module, StackedLinear) and module.shared_input == (not layers):
                layers.append(_Linear(module))
            elif layers and isinstance(layers[-1], _Linear) and _supported(module):
                layers.append(_Activation(module))
            elif not isinstance(module, nn.Identity):
                return None
        if not layers or not isinstance(layers[-1], _Linear):
            return None
        return cls(flatten, layers)

    def run(
        self,
        x: torch.Tensor,
        targets: torch.Tensor,
        row_weight: torch.Tensor,
        sizes: list[int],
    ) -> torch.Tensor:
        """One step: set every stacked parameter's ``grad``; returns the logits ``[rows, C]``.

        Args:
            x: the shared batch (trial ``i`` reads its first ``sizes[i]`` rows).
            targets: the target of every ragged row.
            row_weight: ``1/b_i`` for every row of trial ``i`` (its mean).
            sizes: each trial's batch size, in the group's order.
        """
        views = self._views_for(sizes)
        with torch.no_grad():
            h = x.flatten(1) if self._flatten else x
            # into a kept tensor, so that every trial's rows of it are kept views too
            h = views.empty("input", self._head_weight, h.shape, h).copy_(h)
            saved = []  # per layer: its input and output
            for layer in self._layers:
                if isinstance(layer, _Linear):
                    m = layer.module
                    out = linear_forward(h, m.weight, m.bias, sizes, m.shared_input, views)
                else:
                    out = _activate(layer.runs(len(sizes)), h, sizes, views)
                saved.append((h, out))
                h = out
            log_p = torch.log_softmax(h, 1)
            grad = aten.nll_loss_backward(
                row_weight, log_p, targets, None, NO_REDUCTION, IGNORE_INDEX, log_p.new_ones(())
            )
            grad = aten._log_softmax_backward_data.out(
                grad, log_p, 1, log_p.dtype,
                out=views.empty("loss_grad", self._head_weight, log_p.shape, log_p),
            )  # fmt: skip
            for index in range(len(self._layers) - 1, -1, -1):
                layer, (inputs, output) = self._layers[index], saved[index]
                if isinstance(layer, _Activation):
                    runs = layer.runs(len(sizes))
                    grad = _activation_grad(runs, grad, inputs, output, sizes, views)
                    continue
                m = layer.module
                grad_x, m.weight.grad, grad_b = linear_backward(
                    grad, inputs, m.weight, sizes, m.shared_input, m.bias is not None, index > 0,
                    views,
                )  # fmt: skip
                if m.bias is not None:
                    m.bias.grad = grad_b
                grad = grad_x
        return h

    @property
    def _head_weight(self) -> torch.Tensor:
        """The last layer's weight: the owner of the step's own outputs."""
        return self._layers[-1].module.weight

    def _views_for(self, sizes: list[int]) -> FreshViews:
        """Views and outputs kept while the layout holds: the same sizes, parameters and
        activation runs (repacking replaces the parameters and the runs)."""
        params = [
            t
            for layer in self._layers
            if isinstance(layer, _Linear)
            for t in (layer.module.weight, layer.module.bias)
            if t is not None
        ]
        runs = [
            tuple(layer.runs(len(sizes)))
            for layer in self._layers
            if isinstance(layer, _Activation)
        ]
        layout = (tuple(sizes), params, runs)
        if not _same_layout(layout, self._layout):
            self._layout, self._views = layout, KeptViews(params)
        return self._views

    def _agrees(self, fused: nn.Module, probe: torch.Tensor, rows: list[int]) -> bool:
        """Output and gradients equal the autograd path's on ``probe``, bit for bit."""
        targets = torch.zeros(sum(rows), dtype=torch.long, device=probe.device)
        weight = mean_weights(rows, probe.device)
        params = list(fused.parameters())
        try:
            out = fused(probe)
            (F.cross_entropy(out, targets, reduction="none") * weight).sum().backward()
            expected = [out.detach()] + [p.grad for p in params]
            for p in params:
                p.grad = None
            got = [self.run(probe, targets, weight, rows)] + [p.grad for p in params]
        except (RuntimeError, ValueError, TypeError):
            return False
        finally:
            for p in params:
                p.grad = None
        return all(g is not None and e is not None and torch.equal(g, e)
                   for g, e in zip(got, expected, strict=True))  # fmt: skip


def _supported(module: nn.Module) -> bool:
    """An activation (or each of a StackedActivation's) whose kernels are known."""
    if isinstance(module, StackedActivation):
        return all(type(fn) in ACTIVATION_KERNELS for _, _, fn in module.runs)
    return type(module) in ACTIVATION_KERNELS


def _same_layout(a: tuple | None, b: tuple | None) -> bool:
    """Equal sizes and runs, and the very same parameter tensors (``==`` would compare values)."""
    if a is None or b is None:
        return False
    (sizes_a, params_a, runs_a), (sizes_b, params_b, runs_b) = a, b
    return (
        sizes_a == sizes_b
        and runs_a == runs_b
        and len(params_a) == len(params_b)
        and all(p is q for p, q in zip(params_a, params_b, strict=True))
    )


def _run_rows(runs, sizes: list[int]) -> list[int]:
    return [sum(sizes[lo:hi]) for lo, hi, _ in runs]


def _activate(runs, h: torch.Tensor, sizes: list[int], views: FreshViews) -> torch.Tensor:
    out = views.empty("activation", h, h.shape, h)
    rows = _run_rows(runs, sizes)
    for x, y, (_, _, fn) in zip(views.split(h, rows), views.split(out, rows), runs, strict=True):
        ACTIVATION_KERNELS[type(fn)][0](x, fn, y)
    return out


def _activation_grad(runs, grad, inputs, output, sizes: list[int], views: FreshViews):
    grad_in = views.empty("activation_grad", inputs, grad.shape, grad)
    rows = _run_rows(runs, sizes)
    parts = zip(
        views.split(grad, rows), views.split(inputs, rows), views.split(output, rows),
        views.split(grad_in, rows), runs, strict=True,
    )  # fmt: skip
    for g, x, y, g_in, (_, _, fn) in parts:
        ACTIVATION_KERNELS[type(fn)][1](g, x, y, fn, g_in)
    return grad_in
