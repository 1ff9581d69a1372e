"""What a plan's or a prediction's precision assumes, in one sentence a user can check.

Precision alone moves a GPU's predicted step by up to ~9× (issue 40: a BERT on an A100 at
PyTorch's pip defaults against NVIDIA's containers, which turn TF32 matmuls on), so every
plan and prediction says which precision its numbers assume, what that means on the GPUs
predicted (TF32 exists from Ampere on; fp16 runs faster than fp32 only where the datasheet
says so), and how to choose another. The sentence follows what the device model does with
each precision (perf/precision.py ``peak_flops_per_s``), GPU by GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rightsize.core.catalog import Accelerator
from rightsize.perf.precision import Precision, has_tf32

PIP_DEFAULT = "PyTorch's pip default"
CONTAINERS_HINT = "NVIDIA containers use TF32: --precision tf32"


@dataclass(frozen=True)
class PrecisionStatement:
    """The precision the numbers assume (``precision``) and what it means (``text``)."""

    precision: Precision
    text: str

    @property
    def is_default(self) -> bool:
        return self.precision is Precision.PYTORCH

    def line(self) -> str:
        default = " (the default)" if self.is_default else ""
        return f"precision {self.precision.value}{default}: {self.text}"

    def to_dict(self) -> dict[str, Any]:
        return {"precision": self.precision.value, "default": self.is_default,
                "assumes": self.text}  # fmt: skip


def precision_statement(precision: Precision,
                        accelerators: Iterable[Accelerator]) -> PrecisionStatement:  # fmt: skip
    """What ``precision`` assumes on ``accelerators`` (the GPUs the device model predicted;
    none: the precision changes nothing that is predicted)."""
    accs = {acc.name: acc for acc in accelerators}.values()
    if not accs:
        return PrecisionStatement(precision, "not used: no GPU here is predicted by the device "
                                  "model (measured profiles and CPU instances keep their own)")  # fmt: skip
    no_tf32 = [acc.name for acc in accs if not has_tf32(acc)]
    with_tf32 = len(no_tf32) < len(accs)
    if precision is Precision.PYTORCH:
        return PrecisionStatement(precision, _pytorch_default(no_tf32, with_tf32))
    if precision is Precision.FP32:
        return PrecisionStatement(precision, "fp32 matmuls and convolutions (TF32 off)")
    if precision is Precision.TF32:
        if not with_tf32:
            text = f"fp32 matmuls and convolutions ({_have(no_tf32)} no TF32)"
        else:
            text = "TF32 matmuls and convolutions" + (
                f" (fp32 on {_names(no_tf32)}: no TF32)" if no_tf32 else "")  # fmt: skip
        return PrecisionStatement(precision, text)
    slow = [acc.name for acc in accs if acc.fp16_tflops <= acc.fp32_tflops]
    text = "fp16/bf16 matmuls and convolutions with 16-bit activations (autocast)"
    if slow:
        text += f"; {_have(slow)} no faster fp16, so fp32 rates there"
    return PrecisionStatement(precision, text)


def _pytorch_default(no_tf32: list[str], with_tf32: bool) -> str:
    """PyTorch unasked: cuDNN may use TF32 for convolutions, cuBLAS may not for matmuls."""
    if not with_tf32:
        return f"fp32 matmuls and convolutions ({_have(no_tf32)} no TF32) — {PIP_DEFAULT}"
    older = f" (fp32 on {_names(no_tf32)}: no TF32)" if no_tf32 else ""
    return f"fp32 matmuls, TF32 convolutions{older} — {PIP_DEFAULT}; {CONTAINERS_HINT}"


def _names(names: list[str]) -> str:
    return ", ".join(sorted(names))


def _have(names: list[str]) -> str:
    return f"{_names(names)} {'has' if len(names) == 1 else 'have'}"
