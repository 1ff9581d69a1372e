"""Step time on a GPU from a model's static costs: per-operation-class roofline, calibrated.

The ratio method (perf/roofline.py) scales a step time measured on this CPU by
the ratio of two rooflines. It inherits the CPU's noise (the same profile taken
minutes apart gave a GPU 124 or 616 images/s), its one fp32 peak, and a
piecewise-linear model extrapolated from CPU batches of 2-28 to GPU batches of
hundreds (issue 18). This model needs no timing from the profiling host: only
what a profile counts exactly — each layer's FLOPs, bytes moved and operation
class — and the target's datasheet peaks at the training precision:

    t_phase(B) = Σ_layers max(F_l·B / (P(class_l, precision)·η_c), M_l(B) / (W·η_mem))
                 + kernels · κ
    t_step(B)  = t_forward + t_backward + t_optimizer,

where η_c is the fraction of the peak a class of operation reaches (one for the
CUDA cores, one for the tensor cores), η_mem the fraction of the datasheet
bandwidth, and κ the fixed cost of one kernel (launch and tail). These few
numbers are the same for every GPU: they are fitted on published measurements of
real training (perf/calibration.py, benchmarks/plan/gpu_predictions.py) and shipped
with the package as ``device_efficiencies.json`` with their held-out errors, so
a GPU nobody measured is predicted from its datasheet alone. The fitted spread
of the held-out errors is each prediction's interval.

This is the ``per-class`` method. The ``per-op`` method (perf/op_costs.py,
perf/op_timing.py) times each operation the step dispatches by its shape instead;
:class:`GpuCompute` runs either (``method``), ``per-op`` only for profiles that
recorded their operations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from rightsize.core.catalog import Accelerator
from rightsize.core.errors import SpecError, choose
from rightsize.perf.compute import ComputeTime
from rightsize.perf.fitted import Fitted
from rightsize.perf.op_sheet import Linear, OpCost, OpKind, OpSheet
from rightsize.perf.op_timing import OpEfficiencies, StepTime, op_step_time
from rightsize.perf.precision import (
    OpClass,
    Precision,
    op_class_for,
    peak_flops_per_s,
    runs_on_tensor_cores,
)
from rightsize.profiling.profile import Profile

KERNELS_PER_LAYER = {"forward": 2, "backward": 3}  # e.g. conv + BN forward; dgrad, wgrad, BN
#: Bytes the optimizer moves per parameter byte: SGD with momentum reads w, g and its buffer
#: and writes w and the buffer (Adam moves 7: two moments); the profiles use SGD (profiler.py).
OPTIMIZER_BYTES_PER_PARAM_BYTE = 5.0
#: Autocast keeps fp32 master weights and casts them to 16 bits each step: read 4, write 2.
AMP_CAST_BYTES_PER_PARAM_BYTE = 1.5
EFFICIENCIES_FILE = "device_efficiencies.json"


@dataclass(frozen=True)
class LayerCost:
    """One layer's static costs (per sample where they scale with the batch)."""

    op_class: OpClass
    forward_flops: float
    backward_flops: float
    output_bytes: float
    param_bytes: float


@dataclass(frozen=True)
class CostSheet:
    """What one training step of a model costs, counted, not timed.

    Attributes:
        layers: the parameter layers, then two entries for the work outside them
            (:meth:`of_layers`).
        param_bytes: all parameters (the optimizer's and autocast's traffic).
    """

    layers: tuple[LayerCost, ...]
    param_bytes: float

    @classmethod
    def of_layers(cls, layers: list[LayerCost], forward_flops: float, backward_flops: float,
                  activation_bytes_per_sample: float) -> CostSheet:  # fmt: skip
        """A sheet from the parameter layers and the whole model's counts: the FLOPs outside
        the layers are matmuls on activations (attention's scores); the activations saved
        for backward are the element-wise work (activations, pooling, residual adds)."""
        rest_forward = max(0.0, forward_flops - sum(c.forward_flops for c in layers))
        rest_backward = max(0.0, backward_flops - sum(c.backward_flops for c in layers))
        rest = [LayerCost(OpClass.ATTENTION, rest_forward, rest_backward, 0.0, 0.0),
                LayerCost(OpClass.NORM, 0.0, 0.0, activation_bytes_per_sample, 0.0)]  # fmt: skip
        return cls((*layers, *rest), float(sum(c.param_bytes for c in layers)))

    @classmethod
    def of_profile(cls, profile: Profile) -> CostSheet:
        layers = [
            LayerCost(op_class_for(layer.op_class, layer.forward_flops_per_sample),
                      layer.forward_flops_per_sample, layer.backward_flops_per_sample,
                      layer.output_bytes_per_sample, layer.param_bytes)
            for layer in profile.layers
        ]  # fmt: skip
        return cls.of_layers(layers, profile.forward_flops_per_sample,
                             profile.backward_flops_per_sample,
                             profile.memory.activation_bytes_per_sample)  # fmt: skip


@dataclass(frozen=True)
class Efficiencies(Fitted):
    """The calibrated fractions of peak, and the interval of the predictions they give
    (provenance: :class:`~rightsize.perf.fitted.Fitted`).

    Attributes:
        cuda_core: per tensor-capable class, the fraction of the fp32 peak it reaches.
        tensor_core: the same on tensor cores (TF32, fp16/bf16).
        memory: the fraction of the datasheet bandwidth memory-bound work reaches.
        kernel_s: the fixed cost of one kernel.
    """

    FILE: ClassVar[str] = EFFICIENCIES_FILE
    WHAT: ClassVar[str] = "device efficiencies"

    cuda_core: Mapping[OpClass, float]
    tensor_core: Mapping[OpClass, float]
    memory: float
    kernel_s: float

    def compute(self, op_class: OpClass, tensor: bool) -> float:
        return (self.tensor_core if tensor else self.cuda_core)[op_class]

    def to_dict(self) -> dict:
        return {
            "cuda_core": {c.value: v for c, v in self.cuda_core.items()},
            "tensor_core": {c.value: v for c, v in self.tensor_core.items()},
            "memory": self.memory, "kernel_s": self.kernel_s, **self.fit_dict(),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping) -> Efficiencies:
        """Raises: SpecError on a missing class or a fraction outside (0, 1]."""
        try:
            cuda = {c: float(data["cuda_core"][c.value]) for c in TENSOR_CLASSES}
            tensor = {c: float(data["tensor_core"][c.value]) for c in TENSOR_CLASSES}
            memory, kernel_s = float(data["memory"]), float(data["kernel_s"])
        except (KeyError, TypeError, ValueError) as exc:
            raise cls.missing(exc) from None
        cls.check_fractions([*cuda.items(), *tensor.items(), ("memory", memory)])
        return cls(cuda, tensor, memory, kernel_s, **cls.fit_fields(data))


TENSOR_CLASSES = tuple(c for c in OpClass if c.uses_tensor_cores)


def _phase_s(sheet: CostSheet, acc: Accelerator, precision: Precision, eff: Efficiencies,
             batch: float, phase: str, by_class: dict[str, float]) -> float:  # fmt: skip
    backward = phase == "backward"
    bandwidth = acc.mem_bandwidth_gbs * 1e9 * eff.memory
    act = precision.activation_bytes_factor
    total = 0.0
    for layer in sheet.layers:
        flops = (layer.backward_flops if backward else layer.forward_flops) * batch
        # weights read (forward); read, gradient written and read (backward); activations
        # read and written, once more in backward
        moved = layer.param_bytes * (3 if backward else 1)
        moved += (3 if backward else 2) * layer.output_bytes * act * batch
        memory_s = moved / bandwidth
        compute_s = 0.0
        rate = peak_flops_per_s(acc, precision, layer.op_class)
        if flops > 0 and layer.op_class.uses_tensor_cores:
            tensor = runs_on_tensor_cores(acc, precision, layer.op_class)
            compute_s = flops / (rate * eff.compute(layer.op_class, tensor))
        elif flops > 0:  # memory-bound classes: their few FLOPs on the CUDA cores at fp32
            compute_s = flops / rate
        layer_s = max(compute_s, memory_s)
        by_class[layer.op_class.value] = by_class.get(layer.op_class.value, 0.0) + layer_s
        total += layer_s
    kernels = KERNELS_PER_LAYER[phase] * len(sheet.layers)
    by_class["kernels"] = by_class.get("kernels", 0.0) + kernels * eff.kernel_s
    return total + kernels * eff.kernel_s


def step_time(sheet: CostSheet, acc: Accelerator, precision: Precision, batch: float,
              eff: Efficiencies) -> StepTime:  # fmt: skip
    """The predicted time of one training step at per-device batch ``batch``.

    Raises:
        SpecError: a batch that is not positive.
    """
    if batch <= 0:
        raise SpecError(f"batch must be positive, got {batch}")
    by_class: dict[str, float] = {}
    forward = _phase_s(sheet, acc, precision, eff, batch, "forward", by_class)
    backward = _phase_s(sheet, acc, precision, eff, batch, "backward", by_class)
    moved = OPTIMIZER_BYTES_PER_PARAM_BYTE * sheet.param_bytes
    if precision is Precision.AMP:
        moved += AMP_CAST_BYTES_PER_PARAM_BYTE * sheet.param_bytes
    optimizer = moved / (acc.mem_bandwidth_gbs * 1e9 * eff.memory)
    by_class["optimizer"] = optimizer
    return StepTime(forward, backward, optimizer, by_class)


class DeviceModel(StrEnum):
    """The device models: each dispatched operation by its shape (the default since
    2026-11-29: better held out by GPU and by model, and on the reserved check's absolute
    error, docs/benchmarks.md), or one efficiency per operation class (profiles that did
    not record their operations fall back to it)."""

    PER_CLASS = "per-class"
    PER_OP = "per-op"


def op_sheet_of(profile: Profile) -> OpSheet | None:
    """The operations a profile recorded, or None (profiles made before they were)."""
    if profile.op_costs is None:
        return None
    return OpSheet(tuple(
        OpCost(op.name, OpKind(op.kind), op.phase, op.count, Linear(*op.flops),
               Linear(*op.bytes), tuple(Linear(*d) for d in op.gemm))
        for op in profile.op_costs
    ))  # fmt: skip


@dataclass(frozen=True)
class GpuCompute:
    """The planner's compute model for one GPU (``predict(batch)``, ``optimizer_s``), from a
    profile's cost sheet and the shipped calibration: per operation (``ops`` and
    ``op_efficiencies`` given) or per operation class."""

    sheet: CostSheet
    accelerator: Accelerator
    precision: Precision
    efficiencies: Efficiencies
    ops: OpSheet | None = None
    op_efficiencies: OpEfficiencies | None = None

    @classmethod
    def of(cls, profile: Profile, acc: Accelerator, precision: Precision,
           efficiencies: Efficiencies | None = None,
           method: DeviceModel | str = DeviceModel.PER_OP,
           op_efficiencies: OpEfficiencies | None = None) -> GpuCompute:  # fmt: skip
        """Raises: SpecError on an unknown ``method``. ``per-op`` on a profile without
        recorded operations falls back to ``per-class`` (:attr:`method` says which ran)."""
        chosen = choose(DeviceModel, method, "device model", "method")
        ops = op_sheet_of(profile) if chosen is DeviceModel.PER_OP else None
        return cls(CostSheet.of_profile(profile), acc, precision,
                   efficiencies or Efficiencies.shipped(), ops,
                   (op_efficiencies or OpEfficiencies.shipped()) if ops else None)  # fmt: skip

    @property
    def method(self) -> DeviceModel:
        return DeviceModel.PER_OP if self.ops is not None else DeviceModel.PER_CLASS

    @property
    def log_spread(self) -> float:
        """The held-out |log(predicted/measured)| of the calibration in use (80th percentile)."""
        used = self.op_efficiencies if self.ops is not None else self.efficiencies
        return used.log_spread

    def step(self, batch: float) -> StepTime:
        if self.ops is not None and self.op_efficiencies is not None:
            return op_step_time(self.ops, self.sheet.param_bytes, self.accelerator,
                                self.precision, batch, self.op_efficiencies)  # fmt: skip
        return step_time(self.sheet, self.accelerator, self.precision, batch, self.efficiencies)

    def predict(self, batch: float) -> ComputeTime:
        step = self.step(batch)
        return ComputeTime(step.forward_s, step.backward_s, step.forward_s + step.backward_s)

    @property
    def optimizer_s(self) -> float:
        return self.step(1).optimizer_s

    def interval(self, seconds: float) -> tuple[float, float]:
        """The range a predicted time lies in, at the calibration's held-out spread."""
        spread = math.exp(self.log_spread)
        return seconds / spread, seconds * spread
