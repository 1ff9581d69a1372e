"""The operations one training step dispatches, each with its kind, FLOPs, bytes and shape.

A model's module types say little about what a GPU runs: one ``nn.Linear`` may
hold a fused Q/K/V projection, an attention written with ``torch.matmul`` and
``softmax`` has no parameters at all, and ``F.scaled_dot_product_attention`` or
``einsum`` hide their matmuls from module hooks. Below the modules, PyTorch
dispatches the same few aten operations whatever way the model was written:
``mm``/``addmm``/``bmm`` for matmuls, ``convolution`` for convolutions, one of the
``_scaled_dot_product_*`` kernels for fused attention, and memory-bound
element-wise, normalisation, gather and reduction kernels. :class:`OpRecorder`
(a ``TorchDispatchMode``) records each of them in one forward and backward pass:

- its kind (:class:`OpKind`),
- its FLOPs (PyTorch's own formulas, ``torch.utils.flop_counter``, for matmuls and
  convolutions; attention's from its shapes, since the CPU's fused kernels have
  no registered formula),
- the bytes it reads and writes (its tensor arguments and results; views move none),
- for matmul-like work its GEMM shape ``(batch, M, N, K)`` — a convolution as the
  implicit GEMM cuDNN runs (M = images · output pixels, N = output channels,
  K = input channels per group · kernel area), attention as its two matmuls, a fused
  recurrent layer (oneDNN's on the CPU, standing for cuDNN's) as one time step's GEMM.
  Meta tensors decompose recurrent layers into per-step kernels a GPU does not run:
  count models with recurrent layers on the CPU.

A step is counted at two batch sizes, ``b`` and ``2b``; the same operations come
out in the same order, so every number of every operation is a line in the batch
(``fixed + per_sample · B``): the batch-sized GEMM dimension grows, the weights'
do not. Identical operations (a transformer's twelve layers) are kept once with
a count. The result, :class:`OpSheet`, predicts each operation's shape at any
batch (perf/op_timing.py times it on a GPU).

Each pass's records are rewritten by perf/op_canon.py as what they are — an attention
however it was written, re-layout copies, a projection split in three — so that the
same network written differently counts the same (issue 40).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from rightsize.perf.op_canon import canonical
from rightsize.perf.op_sheet import OpKind, OpRecord, OpSheet, attention_name

#: Operations that launch no kernel and move no memory on a GPU (allocations, views the
#: schema does not mark as such).
FREE_OPS = frozenset({
    "_unsafe_view", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "lift_fresh", "detach", "alias", "_to_copy_meta", "sym_size", "sym_stride", "is_same_size",
})  # fmt: skip
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm"})
CONV_OPS = frozenset({"convolution", "_convolution", "convolution_overrideable",
                      "cudnn_convolution", "_slow_conv2d_forward", "convolution_backward"})  # fmt: skip
NORM_WORDS = ("norm",)
SOFTMAX_WORDS = ("softmax",)
EMBEDDING_WORDS = ("embedding", "index_select", "gather", "index_add", "scatter")
REDUCTION_OPS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "var", "std",
                           "var_mean", "norm", "linalg_vector_norm", "prod", "logsumexp",
                           "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
                           "nll_loss2d_backward", "_log_softmax"})  # fmt: skip


#: Fused recurrent layers (one direction of one layer each; inputs time-major).
RNN_OPS = frozenset({"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"})


def kind_of(name: str) -> OpKind:
    """An aten operation's kind from its packet name (``aten.addmm.default`` -> ``addmm``)."""
    if name in RNN_OPS:
        return OpKind.RNN
    if name in GEMM_OPS:
        return OpKind.GEMM
    if name in CONV_OPS:
        return OpKind.CONV
    if name.startswith("_scaled_dot_product") or name in ("_flash_attention_forward",
                                                          "_flash_attention_backward",
                                                          "_efficient_attention_forward",
                                                          "_efficient_attention_backward"):
        return OpKind.ATTENTION
    if "softmax" in name and "log" not in name:
        return OpKind.SOFTMAX
    if any(w in name for w in NORM_WORDS) and name not in REDUCTION_OPS:
        return OpKind.NORM
    if any(w in name for w in EMBEDDING_WORDS):
        return OpKind.EMBEDDING
    if name in REDUCTION_OPS:
        return OpKind.REDUCTION
    return OpKind.ELEMENTWISE


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _nbytes(tensors: list[torch.Tensor]) -> float:
    """Bytes of distinct tensors (an argument passed twice is read once); a broadcast view
    (stride 0) counts the memory it covers, not its logical size."""
    seen, total = set(), 0.0
    for t in tensors:
        key = (id(t.untyped_storage()) if t.device.type != "meta" else id(t), t.storage_offset(),
               tuple(t.shape), tuple(t.stride()))  # fmt: skip
        if key in seen:
            continue
        seen.add(key)
        covered = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True) if s)
        total += min(t.numel(), covered) * t.element_size() if t.numel() else 0.0
    return total


def _gemm_shape(name: str, args) -> tuple[float, float, float, float]:
    """The GEMM a matmul or convolution runs: (batch, M, N, K)."""
    if name in ("mm", "_scaled_mm"):
        (m, k), n = args[0].shape, args[1].shape[1]
        return 1.0, m, n, k
    if name == "addmm":
        (m, k), n = args[1].shape, args[2].shape[1]
        return 1.0, m, n, k
    if name in ("bmm", "baddbmm"):
        a, b = (args[0], args[1]) if name == "bmm" else (args[1], args[2])
        return a.shape[0], a.shape[1], b.shape[2], a.shape[2]
    # convolutions: forward (input, weight, ...), backward (grad_out, input, weight, ...)
    inputs, weight = (args[1], args[2]) if name == "convolution_backward" else (args[0], args[1])
    groups = {"convolution": 8, "_convolution": 8, "convolution_backward": 9}.get(name)
    groups = int(args[groups]) if groups is not None and len(args) > groups else 1
    out_channels, in_per_group = weight.shape[0], weight.shape[1]
    kernel = math.prod(weight.shape[2:])
    out_pixels = (math.prod(args[0].shape[2:]) if name == "convolution_backward"
                  else _conv_output_pixels(args))  # fmt: skip
    return (groups, inputs.shape[0] * out_pixels, out_channels / groups, in_per_group * kernel)


def _conv_output_pixels(args) -> float:
    inputs, weight = args[0], args[1]
    stride, padding, dilation = (list(a) for a in args[3:6])
    transposed = bool(args[6]) if len(args) > 6 else False
    pixels = 1
    for i, size in enumerate(inputs.shape[2:]):
        k = (weight.shape[2 + i] - 1) * dilation[i] + 1
        if transposed:
            out = (size - 1) * stride[i] - 2 * padding[i] + k
        else:
            out = (size + 2 * padding[i] - k) // stride[i] + 1
        pixels *= out
    return pixels




def _rnn(args, phase: str) -> tuple[float, tuple[float, float, float, float]]:
    """A fused recurrent layer's FLOPs and the GEMM one time step runs.

    Each step multiplies the batch's inputs and hidden state by the gates' weights,
    ``2 · B · G·H · (I + H)`` FLOPs (backward twice that: the inputs' and the weights'
    gradients); the steps run one after another, so the GEMM that fills the GPU is one
    step's: (1, B, G·H, I + H). Arguments: (input [T, B, I], w_ih [G·H, I], w_hh [G·H, H],
    ...), the input time-major whatever the module's ``batch_first``.
    """
    inputs, w_ih, w_hh = args[0], args[1], args[2]
    gates_hidden, width, hidden = w_ih.shape[0], w_ih.shape[1], w_hh.shape[1]
    steps, batch = inputs.shape[0], inputs.shape[1]
    flops = 2.0 * steps * batch * gates_hidden * (width + hidden)
    return flops * (1 if phase == "forward" else 2), (1.0, batch, gates_hidden, width + hidden)


def _attention(args, phase: str) -> tuple[float, tuple[float, float, float, float]]:
    """Fused attention's FLOPs and its matmuls' shape (heads, sq, skv, d).

    Arguments: (query, key, value, ...) forward; (grad_out, query, key, value, ...) backward.
    """
    q, k = (args[0], args[1]) if phase == "forward" else (args[1], args[2])
    *lead, sq, d = q.shape
    skv = k.shape[-2]
    heads = math.prod(lead)
    matmuls = 2 if phase == "forward" else 4  # QK^T, PV; backward: dP, dV, dQ, dK
    flops = matmuls * 2.0 * heads * sq * skv * d
    return flops, (heads, sq, skv, d)


def _key(t: torch.Tensor) -> int:
    """A storage's identity, shared by its views (meta tensors' too)."""
    return t.untyped_storage()._cdata


def _attention_name(func, args, kwargs) -> str:
    """A fused attention's name as perf/op_canon.py names attention: masked (an ``attn_mask``
    or ``attn_bias`` argument), dropped out (``dropout_p`` > 0)."""
    values = dict(kwargs)
    for argument, value in zip(func._schema.arguments, args, strict=False):
        values[argument.name] = value
    masked = any(values.get(n) is not None for n in ("attn_mask", "attn_bias"))
    return attention_name(masked, float(values.get("dropout_p") or 0.0) > 0)


class OpRecorder(TorchDispatchMode):
    """Records every operation dispatched while active (:class:`OpRecord`); set ``phase``
    before the backward pass. The storages it saw are held until it is dropped, so that no
    key (a storage's address) is reused by another tensor within the step."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[OpRecord] = []
        self.phase = "forward"
        self._held: list = []

    def _keys(self, tensors: list[torch.Tensor]) -> list[int]:
        self._held.extend(t.untyped_storage() for t in tensors)
        return [_key(t) for t in tensors]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name.split("::")[-1]
        if name in FREE_OPS or any(r.alias_info is not None and not r.alias_info.is_write
                                   for r in func._schema.returns):  # fmt: skip
            return out  # a view or an allocation: no kernel, no traffic
        kind = kind_of(name)
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        moved = _nbytes(inputs + outputs)
        flops, shape = 0.0, (0.0, 0.0, 0.0, 0.0)
        if kind is OpKind.ATTENTION:
            flops, shape = _attention(args, self.phase)
            name = _attention_name(func, args, kwargs)
        elif kind is OpKind.RNN:
            flops, shape = _rnn(args, self.phase)
        elif kind.matmul_like:
            formula = flop_registry.get(func._overloadpacket)
            flops = float(formula(*args, **kwargs, out_val=out)) if formula else 0.0
            shape = tuple(float(v) for v in _gemm_shape(name, args))
        largest = max(inputs + outputs, key=lambda t: t.numel(), default=None)
        reads = tuple(zip(self._keys(inputs), (_nbytes([t]) for t in inputs),
                          (t.dim() for t in inputs), strict=True))  # fmt: skip
        self.records.append(OpRecord(
            name, kind, self.phase, flops, moved, shape, reads, tuple(self._keys(outputs)),
            tuple(largest.shape) if largest is not None else (),
            largest.element_size() if largest is not None else 4))  # fmt: skip
        return out


def record_step(step: Callable[[], torch.Tensor], as_dispatched: bool = False) -> list[OpRecord]:
    """The operations of one forward (``step()``, returning the loss) and its backward, as what
    they are (perf/op_canon.py), or ``as_dispatched`` by eager PyTorch."""
    recorder = OpRecorder()
    with recorder:
        loss = step()
        recorder.phase = "backward"
        loss.backward()
    return recorder.records if as_dispatched else canonical(recorder.records)


def count_ops(model: torch.nn.Module, step_at: Callable[[int], Callable[[], torch.Tensor]],
              batch: int = 2, as_dispatched: bool = False) -> OpSheet:  # fmt: skip
    """Count one training step's operations at ``batch`` and ``2 · batch`` (batch 1 takes other
    paths than larger batches in some operations, hence 2).

    Args:
        model: its gradients are cleared before each pass (accumulating into an existing
            gradient dispatches an extra add) and after.
        step_at: for a batch size, a function running the forward pass and returning the loss.
        as_dispatched: each operation eager PyTorch dispatched, not canonicalised (to see
            where the ways of writing one network differ).
    """
    passes = []
    for size in (batch, 2 * batch):
        model.zero_grad(set_to_none=True)
        passes.append(record_step(step_at(size), as_dispatched))
    model.zero_grad(set_to_none=True)
    return OpSheet.from_records(*passes, batch)
