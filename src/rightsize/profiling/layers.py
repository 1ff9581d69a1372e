"""Trainable layers of a model, and their static costs: parameter bytes, FLOPs, output bytes.

A *layer* is a module that owns parameters directly (``layer1.0.conv1``); a
parameter shared by several modules (tied embeddings) belongs to the first that
registers it, so every parameter is counted once. These are the units whose
gradient-ready times Srift's simulator overlaps with communication (§4.1, §4.3),
and whose FLOPs and bytes a roofline scales to another device.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from rightsize.perf.op_costs import count_ops
from rightsize.perf.op_sheet import OpSheet
from rightsize.perf.precision import OpClass
from rightsize.profiling.profile import OpCostProfile
from rightsize.workloads.datasets import Batch
from rightsize.workloads.workload import Workload


@dataclass(frozen=True)
class Layer:
    """One parameter-owning module and its parameters."""

    name: str
    params: tuple[nn.Parameter, ...]
    op_class: OpClass = OpClass.MATMUL

    @property
    def param_count(self) -> int:
        return sum(p.numel() for p in self.params)

    @property
    def param_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.params)


#: Module types by the operation class the device model times them as (perf/precision.py).
MODULE_CLASSES: tuple[tuple[tuple[type[nn.Module], ...], OpClass], ...] = (
    ((nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
      nn.ConvTranspose3d), OpClass.CONV),
    ((nn.MultiheadAttention,), OpClass.ATTENTION),
    ((nn.Linear, nn.Bilinear, nn.RNNBase), OpClass.MATMUL),
    ((nn.Embedding, nn.EmbeddingBag), OpClass.EMBEDDING),
    ((nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm), OpClass.NORM),
)  # fmt: skip


def op_class_of(module: nn.Module | None) -> OpClass:
    """A parameter-owning module's operation class; modules of other types hold a matmul's
    weights more often than not (custom projections), so they count as one."""
    for types, op_class in MODULE_CLASSES:
        if isinstance(module, types):
            return op_class
    return OpClass.MATMUL


def trainable_layers(model: nn.Module) -> list[Layer]:
    """Parameter-owning modules in registration order, each parameter counted once."""
    grouped: dict[str, list[nn.Parameter]] = {}
    for full_name, param in model.named_parameters():  # de-duplicates shared tensors
        if param.requires_grad:
            owner = full_name.rpartition(".")[0] or "(root)"
            grouped.setdefault(owner, []).append(param)
    modules = dict(model.named_modules())
    return [Layer(name, tuple(params), op_class_of(modules.get(name)))
            for name, params in grouped.items()]  # fmt: skip


@dataclass(frozen=True)
class LayerCosts:
    """Per-sample FLOPs (forward and backward) and output bytes of one layer."""

    forward_flops: float
    backward_flops: float
    output_bytes: float


@dataclass(frozen=True)
class ModelCosts:
    """Per-layer costs, and the whole model's FLOPs per sample (ops outside layers included)."""

    layers: list[LayerCosts]
    forward_flops: float
    backward_flops: float


def layer_costs(
    model: nn.Module, workload: Workload, layers: list[Layer], batch: Batch
) -> ModelCosts:
    """Count FLOPs with PyTorch's FlopCounterMode and output sizes with forward hooks.

    Args:
        batch: the batch to count on; results are divided by its size.
    """
    batch_size = batch[1].shape[0]
    modules = dict(model.named_modules())
    outputs: dict[str, float] = {}
    recurrent: dict[str, float] = {}  # forward FLOPs of RNN layers, which the counter misses

    def record_output(name: str):
        def hook(module, inputs, output):
            tensors = output if isinstance(output, (tuple, list)) else (output,)
            size = sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))
            outputs[name] = outputs.get(name, 0.0) + size
            if isinstance(module, nn.RNNBase) and torch.is_tensor(inputs[0]):
                recurrent[name] = recurrent.get(name, 0.0) + rnn_flops(module, inputs[0])

        return hook

    handles = [
        modules[layer.name].register_forward_hook(record_output(layer.name))
        for layer in layers
        if layer.name in modules
    ]
    # forward FLOPs by the modules running (FlopCounterMode's tracker); backward FLOPs by
    # the autograd node running, each node charged to the modules that created it
    # (the tracker's backward attribution charges a module with every later layer's
    # backward until its inputs' gradients are ready: never, for inputs without gradients)
    try:
        with FlopCounterMode(display=False) as forward, NodeOwners(model) as owners:
            loss = workload.loss(model, batch)
        with BackwardFlops(owners) as by_owner, FlopCounterMode(display=False) as both:
            loss.backward()
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
    raw_forward = _per_module(forward)
    fwd = _own_counts(raw_forward, layers, model)
    back = _own_counts(by_owner.flops, layers, model)
    forward_total = raw_forward.get("Global", 0.0)
    backward_total = _per_module(both).get("Global", 0.0)
    for name, flops in recurrent.items():
        if fwd.get(name, 0.0) == 0.0:  # backward: the gradients of inputs and of weights
            fwd[name], back[name] = flops, 2 * flops
            forward_total, backward_total = forward_total + flops, backward_total + 2 * flops
    costs: list[LayerCosts] = []
    for layer in layers:
        costs.append(LayerCosts(
            forward_flops=fwd.get(layer.name, 0.0) / batch_size,
            backward_flops=back.get(layer.name, 0.0) / batch_size,
            output_bytes=outputs.get(layer.name, 0.0) / batch_size,
        ))  # fmt: skip
    return ModelCosts(costs, forward_total / batch_size, backward_total / batch_size)


RNN_GATES = {"LSTM": 4, "GRU": 3}  # plain RNNs: 1


def rnn_flops(rnn: nn.RNNBase, inputs: torch.Tensor) -> float:
    """Forward FLOPs of a recurrent layer over ``inputs`` (PyTorch's fused RNN kernels on CPU
    are not seen by FlopCounterMode): per time step, per layer and direction, each gate's
    two matmuls, ``2 · hidden · (input + hidden)`` FLOPs per sample."""
    if inputs.dim() == 2:  # unbatched (seq, features)
        steps, samples = inputs.shape[0], 1
    else:
        steps, samples = (inputs.shape[1], inputs.shape[0]) if rnn.batch_first else inputs.shape[:2]
    gates = RNN_GATES.get(rnn.mode, 1)
    directions = 2 if rnn.bidirectional else 1
    flops = 0.0
    for layer in range(rnn.num_layers):
        width = rnn.input_size if layer == 0 else rnn.hidden_size * directions
        flops += directions * gates * 2 * rnn.hidden_size * (width + rnn.hidden_size)
    return flops * steps * samples


class NodeOwners(TorchFunctionMode):
    """Which of a model's modules were running when each autograd node was created.

    Inside a module's forward, each call's new nodes (those reached from its results and
    arguments — an in-place write gives its argument a new one — not yet seen) belong to the
    modules then running, innermost last, named as FlopCounterMode names them. A node
    created where no call is seen (a custom ``autograd.Function``) goes to the next call
    that reaches it.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        root = type(model).__name__
        self._names = {id(m): f"{root}.{n}" if n else root for n, m in model.named_modules()}
        self._running: list[str] = []
        self.owners: dict[object, tuple[str, ...]] = {}  # node -> module names; holds the nodes

    def __enter__(self):
        self._hooks = (register_module_forward_pre_hook(self._enter_module),
                       register_module_forward_hook(self._leave_module))  # fmt: skip
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self._hooks:
            hook.remove()
        return super().__exit__(*exc)

    def _enter_module(self, module: nn.Module, _inputs) -> None:
        self._running.append(self._names.get(id(module), ""))

    def _leave_module(self, _module: nn.Module, _inputs, _output) -> None:
        self._running.pop()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        running = tuple(name for name in self._running if name)
        pending = [t.grad_fn for t in tree_flatten((out, args, kwargs))[0]
                   if isinstance(t, torch.Tensor) and t.grad_fn is not None]  # fmt: skip
        while pending:
            node = pending.pop()
            if node is None or node in self.owners:
                continue
            self.owners[node] = running
            pending.extend(next_node for next_node, _ in node.next_functions)
        return out


class BackwardFlops(TorchDispatchMode):
    """FLOPs of the backward pass by module: each operation charged to the modules that
    created the autograd node running it (:class:`NodeOwners`), by FlopCounterMode's formulas.
    Entered below a FlopCounterMode, it sees the operations that one counts, decomposed alike.
    """

    def __init__(self, owners: NodeOwners) -> None:
        super().__init__()
        self._owners = owners.owners
        self.flops: dict[str, float] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            flops = float(formula(*args, **kwargs, out_val=out))
            for name in self._owners.get(torch._C._current_autograd_node(), ()):
                self.flops[name] = self.flops.get(name, 0.0) + flops
        return out


def _own_counts(counts: dict[str, float], layers: list[Layer], model: nn.Module) -> dict[str, float]:
    """Each layer's FLOPs without those of the layers inside it.

    The counter's per-module totals include submodules: an attention block that owns its
    input projection also counts its output projection, itself a layer (nn.MultiheadAttention's
    ``out_proj``), so that projection would be counted twice.
    """
    root = type(model).__name__
    names = {layer.name for layer in layers}
    own = {name: counts.get(f"{root}.{name}", 0.0) for name in names}
    for name in names:
        parent = name.rpartition(".")[0]
        while parent and parent not in names:  # the nearest enclosing layer, if any
            parent = parent.rpartition(".")[0]
        if parent:
            own[parent] -= counts.get(f"{root}.{name}", 0.0)
    return own


def _per_module(mode: FlopCounterMode) -> dict[str, float]:
    return {name: float(sum(ops.values())) for name, ops in mode.get_flop_counts().items()}


def step_ops(model: nn.Module, workload: Workload, batch_size: int,
             device: str = "cpu") -> tuple[OpCostProfile, ...] | None:  # fmt: skip
    """The operations one training step dispatches (perf/op_costs.py), counted at
    ``batch_size`` and twice it, as a profile records them; None for a model that dispatches
    different operations at different batches (it is then timed per operation class).

    Counted on a copy of the model on meta tensors (shapes only: a fraction of a second
    instead of two real steps), except for models with recurrent layers, which meta tensors
    decompose into per-step kernels: those on ``device``, as the CPU and cuDNN run them fused.
    """
    recurrent = any(isinstance(m, nn.RNNBase) for m in model.modules())
    counted, where = (model, device) if recurrent else (copy.deepcopy(model).to("meta"), "meta")

    def step_at(n: int):
        inputs, target = workload.example_batch(n, device)
        batch = (tuple(t.to(where) for t in inputs), target.to(where))
        return lambda: workload.loss(counted, batch)

    try:
        sheet = count_ops(counted, step_at, batch_size)
    except ValueError:
        return None
    except (NotImplementedError, RuntimeError):  # an operation without a meta kernel
        if where == device:
            return None
        return step_ops_on(model, workload, batch_size, device)
    return ops_for_profile(sheet)


def step_ops_on(model: nn.Module, workload: Workload, batch_size: int,
                device: str) -> tuple[OpCostProfile, ...] | None:  # fmt: skip
    """:func:`step_ops` with real tensors on ``device``."""

    def step_at(n: int):
        batch = workload.example_batch(n, device)
        return lambda: workload.loss(model, batch)

    try:
        return ops_for_profile(count_ops(model, step_at, batch_size))
    except ValueError:
        return None


def ops_for_profile(sheet: OpSheet) -> tuple[OpCostProfile, ...]:
    return tuple(
        OpCostProfile(name=op.name, kind=op.kind.value, phase=op.phase, count=op.count,
                      flops=(op.flops.fixed, op.flops.per_sample),
                      bytes=(op.bytes.fixed, op.bytes.per_sample),
                      gemm=tuple((d.fixed, d.per_sample) for d in op.gemm))
        for op in sheet.ops
    )  # fmt: skip
