"""The fused path: n trials of one architecture as one model with stacked parameters (§3, §3.2).

The packing paper concatenates models into one graph that shares the input
(§2.2, §3.2); for trials of the *same* architecture rightsize goes further and
fuses them layer by layer with grouped operators, so n small matrix products
become one batched product:

- ``Linear`` -> :class:`StackedLinear`: weights ``[n, out, in]``, a batched
  product ``[n, B, in] x [n, in, out]``; gradients are computed by hand
  (``_StackedLinearFn``) so they come out in the weights' own layout, with no
  transposed copy.
- ``Conv2d`` -> :class:`StackedConv2d`: one grouped convolution with
  ``groups = n`` over the channels of all trials side by side.
- The first parameterised layer sees the shared input (§3.2 "refer to the same
  input") and computes every trial's output in one product with the trials'
  weights concatenated; no copy of the input is made per trial.
- ``Flatten`` after convolutions turns ``[B, n*C, h, w]`` into ``[n, B, C*h*w]``.
- Activations and pooling act per element or per channel and are kept as they are.
- With ragged blocks set (:func:`set_blocks`, ``--batch-mode ragged``) the same
  layers compute the ragged layout of :mod:`rightsize.packing.ragged` instead:
  every trial's rows concatenated, no padding.
- With ``mix_activations`` (an extension beyond the paper, which treats a
  different activation as a different model) trials whose models differ only in
  their activation functions are fused too: :class:`StackedActivation` applies
  each trial's own activation to its slice, which is exactly what it computes alone.

Layers are rewritten in the order the template model calls them (recorded on a
probe batch), and the result is verified against each trial's own model on the
probe: a model whose forward does something the rewrite cannot follow (its own
parameters outside these layers, buffers such as BatchNorm statistics, random
layers such as Dropout, reshapes that mix trials) is not fused, and its trials
take the general path instead, so fusion can never silently change a result.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from rightsize.packing.ragged import Spans, ragged_conv2d, ragged_linear, spans

#: Activation functions: elementwise, and the only layers that may differ between
#: trials fused with ``mix_activations``.
ACTIVATIONS = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.ELU)
#: Parameter-free layers that act per element or per channel: safe on stacked layouts.
ELEMENTWISE = (*ACTIVATIONS, nn.Identity, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)

#: How close a fused output must be to each trial's own (float32 rounding of a
#: batched product against single ones is ~1e-7 relative).
PROBE_RTOL = 1e-4
PROBE_ATOL = 1e-5


Segments = tuple[tuple[int, int, int], ...]  # (first trial, end trial, rows) of equal batch size


class _StackedLinearFn(torch.autograd.Function):
    """``y[i] = x[i] @ w[i].T + b[i]`` for each trial ``i``; gradients in ``w``'s layout.

    Weight and bias gradients sum over the batch. With ``segments`` a trial's
    sum runs over its own rows only, never over the padding (§3.1.1), so it is
    the very sum the trial computes alone: same length, same order.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, segments):
        ctx.save_for_backward(x, weight)
        ctx.has_bias, ctx.segments = bias is not None, segments
        if bias is None:
            return torch.bmm(x, weight.transpose(1, 2))
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.empty_like(weight)
        grad_b = weight.new_empty(weight.shape[:2]) if ctx.has_bias else None
        for lo, hi, rows in ctx.segments or ((0, weight.shape[0], grad.shape[1]),):
            if _each_own_product(hi - lo):
                for i in range(lo, hi):  # the calls the trial makes alone (see the helper)
                    torch.mm(grad[i, :rows].t(), x[i, :rows], out=grad_w[i])
                    if grad_b is not None:
                        torch.sum(grad[i, :rows], dim=0, out=grad_b[i])
                continue
            part = grad[lo:hi, :rows]
            torch.bmm(part.transpose(1, 2), x[lo:hi, :rows], out=grad_w[lo:hi])
            if grad_b is not None:
                torch.sum(part, dim=1, out=grad_b[lo:hi])
        return grad_x, grad_w, grad_b, None


def _each_own_product(trials: int) -> bool:
    """Whether a segment's weight gradients must be one product per trial (bit for bit).

    A weight gradient sums over the batch rows. At one thread MKL sums each matrix of
    a batched product in the order the trial's own ``mm`` does. With more threads it
    splits a lone small product's sum (e.g. MLP-3's 10x100 output layer over 45 rows)
    between the threads, but hands whole matrices of a batch to each thread, so a
    segment of two or more trials summed in one ``bmm`` came out in other last bits
    than the trial alone (issue 41). Then each trial gets its own ``mm``: the call it
    makes alone, at the cost of a Python loop over the segment's trials.
    """
    return trials > 1 and torch.get_num_threads() > 1


class _SharedLinearFn(torch.autograd.Function):
    """Every trial's layer on one shared input ``[B, in]``: one product with stacked weights."""

    @staticmethod
    def forward(ctx, x, weight, bias, segments):
        n, out, fan_in = weight.shape
        flat = weight.reshape(n * out, fan_in)
        y = x @ flat.t() if bias is None else torch.addmm(bias.reshape(n * out), x, flat.t())
        ctx.save_for_backward(x, weight)
        ctx.has_bias, ctx.segments = bias is not None, segments
        return y.view(x.shape[0], n, out).transpose(0, 1).contiguous()

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        n, out, fan_in = weight.shape
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = grad.transpose(0, 1).reshape(x.shape[0], n * out) @ weight.reshape(
                n * out, fan_in
            )
        grad_w = torch.empty_like(weight)
        grad_b = weight.new_empty(n, out) if ctx.has_bias else None
        for lo, hi, rows in ctx.segments or ((0, n, grad.shape[1]),):
            if _each_own_product(hi - lo):
                for i in range(lo, hi):  # the calls the trial makes alone
                    torch.mm(grad[i, :rows].t(), x[:rows], out=grad_w[i])
                    if grad_b is not None:
                        torch.sum(grad[i, :rows], dim=0, out=grad_b[i])
                continue
            part = grad[lo:hi, :rows].transpose(0, 1).reshape(rows, (hi - lo) * out)
            torch.mm(part.t(), x[:rows], out=grad_w[lo:hi].view(-1, fan_in))
            if grad_b is not None:
                torch.sum(part, dim=0, out=grad_b[lo:hi].view(-1))
        return grad_x, grad_w, grad_b, None


def _stacked(modules: Sequence[nn.Module], name: str) -> nn.Parameter | None:
    tensors = [getattr(m, name) for m in modules]
    if tensors[0] is None:
        return None
    return nn.Parameter(torch.stack([t.detach() for t in tensors]))


class StackedLinear(nn.Module):
    """n ``Linear`` layers: input ``[n, B, in]`` (or ``[B, in]`` shared), output ``[n, B, out]``."""

    def __init__(self, layers: Sequence[nn.Linear], shared_input: bool) -> None:
        super().__init__()
        self.weight = _stacked(layers, "weight")
        self.bias = _stacked(layers, "bias")
        self.shared_input = shared_input
        self.segments: Segments | None = None  # None: every trial uses every row
        self.blocks: Spans | None = None  # ragged layout: each trial's rows; None: stacked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.blocks is not None:
            return ragged_linear(x, self.weight, self.bias, self.blocks, self.shared_input)
        function = _SharedLinearFn if self.shared_input else _StackedLinearFn
        return function.apply(x, self.weight, self.bias, self.segments)


class StackedConv2d(nn.Module):
    """n ``Conv2d`` layers: input ``[B, n*C, H, W]`` (or ``[B, C, H, W]`` shared)."""

    def __init__(self, layers: Sequence[nn.Conv2d], shared_input: bool) -> None:
        super().__init__()
        first = layers[0]
        self.weight = _stacked(layers, "weight")
        self.bias = _stacked(layers, "bias")
        self.stride, self.padding, self.dilation = first.stride, first.padding, first.dilation
        self.shared_input = shared_input
        self.blocks: Spans | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.blocks is not None:
            conv = {"stride": self.stride, "padding": self.padding, "dilation": self.dilation}
            return ragged_conv2d(x, self.weight, self.bias, self.blocks, self.shared_input, conv)
        n, out = self.weight.shape[:2]
        weight = self.weight.reshape(n * out, *self.weight.shape[2:])
        bias = None if self.bias is None else self.bias.reshape(n * out)
        groups = 1 if self.shared_input else n
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, groups)


class StackedFlatten(nn.Module):
    """``Flatten`` of n trials: ``[B, n*C, h, w]`` -> ``[n, B, C*h*w]``; ``[n, B, F]`` unchanged."""

    def __init__(self, members: int) -> None:
        super().__init__()
        self.members = members
        self.blocks: Spans | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.blocks is not None:
            return x.flatten(1)  # ragged: rows stay rows
        if x.dim() == 3:
            return x
        return x.reshape(x.shape[0], self.members, -1).transpose(0, 1).contiguous()


class StackedActivation(nn.Module):
    """Each trial's own activation on its slice of a stacked tensor (``mix_activations``)."""

    def __init__(self, per_trial: Sequence[nn.Module]) -> None:
        super().__init__()
        self.blocks: Spans | None = None
        self.keep(per_trial)

    def keep(self, per_trial: Sequence[nn.Module]) -> None:
        self.members = len(per_trial)
        #: (first trial, end trial, activation) of each run of consecutive equal activations
        self.runs: list[tuple[int, int, nn.Module]] = []
        for i, module in enumerate(per_trial):
            if self.runs and _same(self.runs[-1][2], module):
                self.runs[-1] = (self.runs[-1][0], i + 1, module)
            else:
                self.runs.append((i, i + 1, module))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.runs) == 1:
            return self.runs[0][2](x)
        if self.blocks is not None:  # ragged: a run of trials is a block of rows
            sizes = [self.blocks[hi - 1][1] - self.blocks[lo][0] for lo, hi, _ in self.runs]
            parts = x.split(sizes)
            return torch.cat([fn(p) for p, (_, _, fn) in zip(parts, self.runs, strict=True)])
        # linear layout [n, B, F]: trials along dim 0; conv layout [B, n*C, H, W]: dim 1.
        # split (not narrow): its backward is one cat, not a zero-filled tensor per run
        dim, width = (0, 1) if x.dim() == 3 else (1, x.shape[1] // self.members)
        sizes = [(hi - lo) * width for lo, hi, _ in self.runs]
        parts = x.split(sizes, dim=dim)
        return torch.cat([fn(part) for part, (_, _, fn) in zip(parts, self.runs, strict=True)], dim)


def structure(model: nn.Module, ignore_activations: bool = False) -> tuple:
    """A model's layers (names, kinds, settings, parameter shapes): equal means fusable together."""
    items = []
    for name, module in model.named_modules():
        if any(module.children()):
            continue
        if ignore_activations and isinstance(module, ACTIVATIONS):
            kind = "activation"
        else:
            kind = (type(module).__name__, module.extra_repr())
        items.append((name, kind, tuple(tuple(p.shape) for p in module.parameters(recurse=False))))
    return tuple(items)


def fuse(
    models: Sequence[nn.Module],
    probe: torch.Tensor,
    mix_activations: bool = False,
    ragged: bool = False,
) -> nn.Module | None:
    """One model computing every trial's output as ``[n, B, ...]``, or None if not fusable.

    Args:
        models: n models of one architecture (same classes, names and shapes).
        probe: a small input batch, to record the call order and to verify the result.
        mix_activations: the models may differ in their activation functions.
        ragged: also verify the ragged layout (every trial on the whole probe).
    """
    template = models[0]
    if any(True for _ in template.buffers()):
        return None  # running statistics (BatchNorm) would be shared or padded
    order = call_order(template, probe)
    if order is None:
        return None
    fused = _rewrite(template, models, order, mix_activations)
    if fused is None or not _matches(fused, models, probe):
        return None
    if ragged:
        set_blocks(fused, [len(probe)] * len(models))
        matches = _matches(fused, models, probe)
        set_blocks(fused, None)
        if not matches:
            return None
    return fused


def resize(fused: nn.Module, keep: torch.Tensor) -> None:
    """Keep only trials ``keep`` (indices, in their new order) in place (repacking, §3.1.2)."""
    for module in fused.modules():
        if isinstance(module, (StackedLinear, StackedConv2d)):
            module.weight = nn.Parameter(module.weight.detach()[keep])
            if module.bias is not None:
                module.bias = nn.Parameter(module.bias.detach()[keep])
        elif isinstance(module, StackedFlatten):
            module.members = len(keep)
        elif isinstance(module, StackedActivation):
            runs = [fn for lo, hi, fn in module.runs for _ in range(lo, hi)]
            module.keep([runs[i] for i in keep.tolist()])


def set_segments(fused: nn.Module, batch_sizes: Sequence[int]) -> None:
    """Tell the stacked layers each trial's batch (trials sorted by batch, largest first)."""
    segments, lo = [], 0
    for hi in range(1, len(batch_sizes) + 1):
        if hi == len(batch_sizes) or batch_sizes[hi] != batch_sizes[lo]:
            segments.append((lo, hi, batch_sizes[lo]))
            lo = hi
    for module in fused.modules():
        if isinstance(module, StackedLinear):
            module.segments = tuple(segments)


RAGGED_LAYERS = (StackedLinear, StackedConv2d, StackedFlatten, StackedActivation)


def set_blocks(fused: nn.Module, rows: Sequence[int] | None) -> None:
    """Switch the fused model to the ragged layout with trial ``i`` on ``rows[i]`` rows (None: stacked)."""
    blocks = None if rows is None else spans(rows)
    for module in fused.modules():
        if isinstance(module, RAGGED_LAYERS):
            module.blocks = blocks


def _rewrite(template: nn.Module, models: Sequence[nn.Module], order: list[str], mix: bool):
    fused = copy.deepcopy(template)
    shared, covered = True, set()
    for name in order:
        module = template.get_submodule(name)
        peers = [m.get_submodule(name) for m in models]
        if not all(_same(module, peer) for peer in peers):
            if not (mix and not shared and all(isinstance(p, ACTIVATIONS) for p in peers)):
                return None
            fused.set_submodule(name, StackedActivation(peers))
            continue
        if isinstance(module, nn.Linear):
            replacement = StackedLinear(peers, shared)
        elif (
            isinstance(module, nn.Conv2d) and module.groups == 1 and module.padding_mode == "zeros"
        ):
            replacement = StackedConv2d(peers, shared)
        elif isinstance(module, nn.Flatten) and (module.start_dim, module.end_dim) == (1, -1):
            replacement = module if shared else StackedFlatten(len(models))
        elif isinstance(module, ELEMENTWISE):
            continue
        else:
            return None
        if replacement is not module:
            fused.set_submodule(name, replacement)
            shared = shared and not isinstance(replacement, (StackedLinear, StackedConv2d))
            covered.update(f"{name}.{p}" for p, _ in replacement.named_parameters())
    own = {name for name, _ in template.named_parameters()}
    return fused if own == covered else None


def _same(a: nn.Module, b: nn.Module) -> bool:
    return type(a) is type(b) and a.extra_repr() == b.extra_repr()


def call_order(template: nn.Module, probe: torch.Tensor) -> list[str] | None:
    """Names of the leaf modules in the order the forward first calls them."""
    order: list[str] = []
    leaves = [(n, m) for n, m in template.named_modules() if n and not any(m.children())]

    def hook(name: str):
        return lambda _module, _inputs: order.append(name) if name not in order else None

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in leaves]
    try:
        with torch.no_grad():
            template(probe)
    except (RuntimeError, ValueError, TypeError):
        return None
    finally:
        for handle in handles:
            handle.remove()
    return order


def _matches(fused: nn.Module, models: Sequence[nn.Module], probe: torch.Tensor) -> bool:
    try:
        with torch.no_grad():
            out = fused(probe)
            expected = [m(probe) for m in models]
    except (RuntimeError, ValueError, TypeError):
        return False
    if out.dim() == expected[0].dim() and out.numel() == len(models) * expected[0].numel():
        out = out.view(len(models), *expected[0].shape)  # ragged: [n * B, ...]
    if out.shape != (len(models), *expected[0].shape):
        return False
    return all(
        torch.allclose(out[i], e, rtol=PROBE_RTOL, atol=PROBE_ATOL) for i, e in enumerate(expected)
    )
