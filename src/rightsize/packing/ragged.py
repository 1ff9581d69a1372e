"""Ragged fused layers: each trial computed over exactly its own rows, no padding (beyond §3.1.1).

The paper pads a packed batch to its largest member (§3.1.1): every trial of a
pack is computed at the largest batch and smaller trials throw the extra rows
away. On the Table 3 space (batches 20-70, mean 45) that is about half again
the work. In the *ragged* layout the rows of all trials of a fused group are
concatenated instead (``[sum of batches, features]``, trial ``i``'s block at
offset ``sum of the batches before it``), and each layer multiplies a trial's
block by that trial's weights only: one ``addmm`` per trial, the very call
(same shapes, same operands) the trial makes alone, so results stay bit for bit.

- The first layer reads the shared input: trial ``i`` multiplies the shared
  batch's first ``b_i`` rows, with no copy.
- Gradients are computed by hand (:class:`_RaggedLinearFn`), written straight
  into the stacked weight gradient, as the trial's own autograd would compute
  them (``grad.t() @ x``, ``grad.sum(0)``, ``grad @ w``).
- Convolutions run one ``conv2d`` per trial on its block; autograd does the rest.

Measured on this CPU, a Python loop of per-trial ``mm`` costs about as much per
FLOP as one ``bmm`` of the same shapes, so removing the padded rows is a net gain.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F

Spans = tuple[tuple[int, int], ...]  # (first row, end row) of each trial's block


def spans(rows: Sequence[int]) -> Spans:
    """Each trial's block of rows in the ragged layout: consecutive, in trial order."""
    out, lo = [], 0
    for count in rows:
        out.append((lo, lo + count))
        lo += count
    return tuple(out)


def mean_weights(sizes: Sequence[int], device: torch.device | str) -> torch.Tensor:
    """``1/b_i`` for every row of trial ``i``'s block: a weighted sum of per-row losses
    is then the sum of the trials' means."""
    return torch.cat([torch.full((b,), 1.0, device=device) / b for b in sizes])


def linear_forward(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, sizes: list[int], shared: bool
) -> torch.Tensor:
    """``y[block i] = x[rows of i] @ w[i].T + b[i]`` for each trial ``i`` (no autograd).

    Per-trial views are taken with one ``split``/``unbind`` per tensor, not one
    indexing call per trial: at MLP-3's sizes a tensor operation's fixed cost
    (~2 us) is a visible share of a trial's product.
    """
    y = x.new_empty(sum(sizes), weight.shape[1])
    inputs = _rows(x, sizes, shared)
    outs = y.split(sizes)
    weights_t = weight.transpose(1, 2).unbind(0)
    if bias is None:
        for x_i, w_i, y_i in zip(inputs, weights_t, outs, strict=True):
            torch.mm(x_i, w_i, out=y_i)
    else:
        for x_i, w_i, b_i, y_i in zip(inputs, weights_t, bias.unbind(0), outs, strict=True):
            torch.addmm(b_i, x_i, w_i, out=y_i)
    return y


def linear_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    sizes: list[int],
    shared: bool,
    has_bias: bool,
    input_grad: bool,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """The gradients of :func:`linear_forward`: ``(input, weight, bias)``, each computed as
    the trial's own autograd computes it (``grad.t() @ x``, ``grad.sum(0)``, ``grad @ w``)."""
    grad_w = torch.empty_like(weight)
    grads_t = grad.t().split(sizes, dim=1)
    for g_t, x_i, gw_i in zip(grads_t, _rows(x, sizes, shared), grad_w.unbind(0), strict=True):
        torch.mm(g_t, x_i, out=gw_i)
    grad_b = None
    if has_bias:
        grad_b = weight.new_empty(weight.shape[:2])
        for g_i, gb_i in zip(grad.split(sizes), grad_b.unbind(0), strict=True):
            torch.sum(g_i, dim=0, out=gb_i)
    grad_x = _input_grad(grad, weight, x, sizes, shared) if input_grad else None
    return grad_x, grad_w, grad_b


class _RaggedLinearFn(torch.autograd.Function):
    """:func:`linear_forward` under autograd, :func:`linear_backward` as its backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, blocks: Spans, shared: bool):
        sizes = [hi - lo for lo, hi in blocks]
        ctx.save_for_backward(x, weight)
        ctx.sizes, ctx.shared, ctx.has_bias = sizes, shared, bias is not None
        return linear_forward(x, weight, bias, sizes, shared)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grads = linear_backward(
            grad, x, weight, ctx.sizes, ctx.shared, ctx.has_bias, ctx.needs_input_grad[0]
        )
        return *grads, None, None


def _rows(x: torch.Tensor, sizes: list[int], shared: bool) -> list[torch.Tensor]:
    """Each trial's input rows: its block, or (shared input) the batch's first ``b_i`` rows."""
    return [x[:size] for size in sizes] if shared else list(x.split(sizes))


def _input_grad(grad, weight, x, sizes: list[int], shared: bool) -> torch.Tensor:
    if shared:  # the trials' gradients add up on the rows they share
        grad_x = torch.zeros_like(x)
        for g_i, w_i in zip(grad.split(sizes), weight.unbind(0), strict=True):
            grad_x[: len(g_i)] += g_i @ w_i
        return grad_x
    grad_x = torch.empty_like(x)
    for g_i, w_i, gx_i in zip(
        grad.split(sizes), weight.unbind(0), grad_x.split(sizes), strict=True
    ):
        torch.mm(g_i, w_i, out=gx_i)
    return grad_x


def ragged_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, blocks: Spans, shared: bool
) -> torch.Tensor:
    """n ``Linear`` layers (weights ``[n, out, in]``) on the ragged layout -> ``[rows, out]``."""
    return _RaggedLinearFn.apply(x, weight, bias, blocks, shared)


def ragged_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    blocks: Spans,
    shared: bool,
    conv: dict,
) -> torch.Tensor:
    """n ``Conv2d`` layers on the ragged layout: one convolution per trial on its block.

    ``split``/``unbind`` (not slicing) keep the backward to one ``cat``/``stack``
    instead of a zero-filled full-size gradient per trial.
    """
    weights = weight.unbind(0)
    biases = bias.unbind(0) if bias is not None else [None] * len(blocks)
    parts = _rows(x, [hi - lo for lo, hi in blocks], shared)
    outs = [F.conv2d(p, w, b, **conv) for p, w, b in zip(parts, weights, biases, strict=True)]
    return torch.cat(outs)
