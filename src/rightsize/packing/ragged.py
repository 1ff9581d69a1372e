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

from collections.abc import Iterable, Sequence

import torch
from torch.nn import functional as F

Spans = tuple[tuple[int, int], ...]  # (first row, end row) of each trial's block


class FreshViews:
    """Per-trial views and output tensors, made anew at every call (the autograd path).

    The ragged functions take their views and outputs from one of these, so
    that :class:`KeptViews` can keep them from one step to the next.
    """

    def empty(self, name: str, owner: torch.Tensor, shape, like: torch.Tensor) -> torch.Tensor:
        """An uninitialized output ``name`` belonging to ``owner`` (e.g. a layer's weight)."""
        return like.new_empty(shape)

    def split(self, t: torch.Tensor, sizes: Sequence[int], dim: int = 0) -> list[torch.Tensor]:
        return list(t.split(sizes, dim))

    def split_t(self, t: torch.Tensor, sizes: Sequence[int]) -> list[torch.Tensor]:
        """Each block of ``t``'s rows, transposed."""
        return list(t.t().split(sizes, dim=1))

    def unbind(self, t: torch.Tensor) -> list[torch.Tensor]:
        return list(t.unbind(0))

    def unbind_t(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Each ``[out, in]`` matrix of a stacked weight, transposed."""
        return list(t.transpose(1, 2).unbind(0))

    def prefixes(self, t: torch.Tensor, sizes: Sequence[int]) -> list[torch.Tensor]:
        """The first ``b_i`` rows of ``t`` for each trial (a shared input)."""
        return [t[:size] for size in sizes]


class KeptViews(FreshViews):
    """:class:`FreshViews` that keep what they make, for a step repeated on one layout.

    Outputs are allocated once per (name, owner) and reused; views are kept for
    tensors this object owns — the ``owned`` ones it is given (weights and
    biases, updated in place by the optimizer) and the outputs it allocated —
    and made anew for any other tensor. At MLP-3's sizes each view or
    allocation is a visible share of a trial's step (a few microseconds against
    a product of ~30), and a pack makes ~20 per trial per step. What is
    computed does not change: the same kernels write into tensors of the same
    shapes and strides. An output is overwritten by the next step, so whoever
    holds one must be done with it by then. A tensor it does not own (a new
    parameter after repacking, a new batch) gets new views and outputs, so
    kept ones never outlive what they view; an owned tensor must not have its
    storage swapped in place (``.data =``, ``set_``), which nothing here does.
    """

    def __init__(self, owned: Iterable[torch.Tensor]) -> None:
        self._owned = {id(t): t for t in owned}
        self._outputs: dict[tuple[str, int], torch.Tensor] = {}
        self._views: dict[tuple, list[torch.Tensor]] = {}

    def empty(self, name: str, owner: torch.Tensor, shape, like: torch.Tensor) -> torch.Tensor:
        key = (name, id(owner))
        out = self._outputs.get(key) if self._owns(owner) else None
        if out is None or out.shape != shape:
            out = like.new_empty(shape)
            if self._owns(owner):
                self._outputs[key] = self._owned[id(out)] = out
        return out

    def split(self, t, sizes, dim=0):
        return self._kept(
            t, ("split", tuple(sizes), dim), lambda: super(KeptViews, self).split(t, sizes, dim)
        )

    def split_t(self, t, sizes):
        return self._kept(
            t, ("split_t", tuple(sizes)), lambda: super(KeptViews, self).split_t(t, sizes)
        )

    def unbind(self, t):
        return self._kept(t, ("unbind",), lambda: super(KeptViews, self).unbind(t))

    def unbind_t(self, t):
        return self._kept(t, ("unbind_t",), lambda: super(KeptViews, self).unbind_t(t))

    def prefixes(self, t, sizes):
        return self._kept(
            t, ("prefixes", tuple(sizes)), lambda: super(KeptViews, self).prefixes(t, sizes)
        )

    def _owns(self, t: torch.Tensor) -> bool:
        return self._owned.get(id(t)) is t

    def _kept(self, t: torch.Tensor, kind: tuple, make) -> list[torch.Tensor]:
        if not self._owns(t):
            return make()
        key = (id(t), *kind)
        views = self._views.get(key)
        if views is None:
            views = self._views[key] = make()
        return views


FRESH = FreshViews()


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
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    sizes: list[int],
    shared: bool,
    views: FreshViews = FRESH,
) -> torch.Tensor:
    """``y[block i] = x[rows of i] @ w[i].T + b[i]`` for each trial ``i`` (no autograd).

    Per-trial views are taken with one ``split``/``unbind`` per tensor, not one
    indexing call per trial: at MLP-3's sizes a tensor operation's fixed cost
    (~2 us) is a visible share of a trial's product.
    """
    y = views.empty("y", weight, (sum(sizes), weight.shape[1]), x)
    inputs = _rows(x, sizes, shared, views)
    outs = views.split(y, sizes)
    weights_t = views.unbind_t(weight)
    if bias is None:
        for x_i, w_i, y_i in zip(inputs, weights_t, outs, strict=True):
            torch.mm(x_i, w_i, out=y_i)
    else:
        biases = views.unbind(bias)
        for x_i, w_i, b_i, y_i in zip(inputs, weights_t, biases, outs, strict=True):
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
    views: FreshViews = FRESH,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """The gradients of :func:`linear_forward`: ``(input, weight, bias)``, each computed as
    the trial's own autograd computes it (``grad.t() @ x``, ``grad.sum(0)``, ``grad @ w``)."""
    grad_w = views.empty("grad_w", weight, weight.shape, weight)
    inputs = _rows(x, sizes, shared, views)
    for g_t, x_i, gw_i in zip(
        views.split_t(grad, sizes), inputs, views.unbind(grad_w), strict=True
    ):
        torch.mm(g_t, x_i, out=gw_i)
    grad_b = None
    if has_bias:
        grad_b = views.empty("grad_b", weight, weight.shape[:2], weight)
        for g_i, gb_i in zip(views.split(grad, sizes), views.unbind(grad_b), strict=True):
            torch.sum(g_i, dim=0, out=gb_i)
    grad_x = _input_grad(grad, weight, x, sizes, shared, views) if input_grad else None
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


def _rows(
    x: torch.Tensor, sizes: list[int], shared: bool, views: FreshViews = FRESH
) -> list[torch.Tensor]:
    """Each trial's input rows: its block, or (shared input) the batch's first ``b_i`` rows."""
    return views.prefixes(x, sizes) if shared else views.split(x, sizes)


def _input_grad(grad, weight, x, sizes: list[int], shared: bool, views: FreshViews = FRESH):
    if shared:  # the trials' gradients add up on the rows they share
        grad_x = torch.zeros_like(x)
        for g_i, w_i in zip(grad.split(sizes), weight.unbind(0), strict=True):
            grad_x[: len(g_i)] += g_i @ w_i
        return grad_x
    grad_x = views.empty("grad_x", weight, x.shape, x)
    for g_i, w_i, gx_i in zip(
        views.split(grad, sizes), views.unbind(weight), views.split(grad_x, sizes), strict=True
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
