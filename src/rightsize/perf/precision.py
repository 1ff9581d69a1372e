"""Numeric precision and operation classes: which peak rate an operation runs at on a GPU.

A GPU has several peaks, not one: fp32 on its CUDA cores, TF32 and fp16/bf16 on
its tensor cores (Volta and later for fp16, Ampere and later for TF32), and one
memory bandwidth. Which peak a layer meets depends on what it is and on the
precision the user trains in:

- ``fp32``: every operation in fp32 on the CUDA cores (TF32 switched off).
- ``tf32``: convolutions, matmuls and attention on TF32 tensor cores where the
  device has them (``torch.backends.cuda.matmul.allow_tf32 = True``).
- ``amp``: automatic mixed precision, the same operations on fp16/bf16 tensor
  cores, activations stored in 16 bits (half the bytes moved).
- ``pytorch`` (the default): what PyTorch does when the user sets nothing —
  cuDNN convolutions may use TF32 (``torch.backends.cudnn.allow_tf32`` is True
  by default) but matmuls may not (``matmul.allow_tf32`` is False since 1.12),
  so on Ampere and later convolutions run in TF32 and matmuls in fp32.

Operation classes are the units the device model gives their own efficiency,
since a GPU reaches very different fractions of its peak on a large
convolution, a matmul, an attention block, a normalisation or an embedding
gather (issue 18). A layer's class comes from its module type at profiling time
(``profiling/layers.py``).
"""

from __future__ import annotations

from enum import StrEnum

from rightsize.core.catalog import Accelerator
from rightsize.core.errors import SpecError


class Precision(StrEnum):
    FP32 = "fp32"
    TF32 = "tf32"
    AMP = "amp"
    PYTORCH = "pytorch"  # PyTorch's defaults: TF32 convolutions, fp32 matmuls

    @classmethod
    def parse(cls, text: str) -> Precision:
        """Raises: SpecError naming the choices."""
        try:
            return cls(text.lower())
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise SpecError(f"precision {text!r} is unknown; choose one of {choices}") from None

    @property
    def activation_bytes_factor(self) -> float:
        """Bytes moved per activation relative to fp32: autocast stores 16-bit activations."""
        return 0.5 if self is Precision.AMP else 1.0


class OpClass(StrEnum):
    CONV = "conv"
    MATMUL = "matmul"  # linear layers and recurrent cells
    ATTENTION = "attention"  # attention blocks and the matmuls outside parameter layers
    NORM = "norm"  # normalisation and the element-wise work around it
    EMBEDDING = "embedding"  # table gathers: memory-bound

    @property
    def uses_tensor_cores(self) -> bool:
        return self in (OpClass.CONV, OpClass.MATMUL, OpClass.ATTENTION)


def op_class_for(name: str | None, flops_per_sample: float) -> OpClass:
    """A profiled layer's class: as recorded, else (profiles before op classes were recorded)
    a matmul when the layer does FLOPs and a memory-bound norm when it does not."""
    if name:
        return OpClass(name)
    return OpClass.MATMUL if flops_per_sample > 0 else OpClass.NORM


def has_tf32(acc: Accelerator) -> bool:
    return acc.tf32_tflops is not None


def peak_flops_per_s(acc: Accelerator, precision: Precision, op_class: OpClass) -> float:
    """The datasheet peak ``op_class`` runs at on ``acc`` in ``precision`` (FLOP/s).

    Memory-bound classes (norm, embedding) are timed by bandwidth; their FLOPs, few, run on
    the CUDA cores at fp32.
    """
    cuda = acc.cuda_core_flops_per_s
    if not op_class.uses_tensor_cores or precision is Precision.FP32:
        return cuda
    if precision is Precision.AMP:
        # without a faster fp16 path (K80, M60, P4) AMP's matmuls run on the CUDA cores
        return acc.fp16_tflops * 1e12 if acc.fp16_tflops > acc.fp32_tflops else cuda
    tf32 = acc.tf32_tflops
    if tf32 is None:
        return cuda
    if precision is Precision.PYTORCH and op_class is not OpClass.CONV:
        return cuda
    return tf32 * 1e12


def runs_on_tensor_cores(acc: Accelerator, precision: Precision, op_class: OpClass) -> bool:
    """Whether ``op_class`` meets a tensor-core peak (another efficiency than the CUDA cores')."""
    peak = peak_flops_per_s(acc, precision, op_class)
    return op_class.uses_tensor_cores and peak > acc.cuda_core_flops_per_s


def describe(precision: Precision, acc: Accelerator) -> str:
    """What ``precision`` means on ``acc``, for plans and predictions."""
    if precision is Precision.PYTORCH:
        conv = "tf32" if has_tf32(acc) else "fp32"
        return f"pytorch default on {acc.name} (convolutions {conv}, matmuls fp32)"
    if precision is Precision.TF32 and not has_tf32(acc):
        return f"tf32 requested; {acc.name} has no TF32 tensor cores, so fp32"
    return f"{precision.value} on {acc.name}"
