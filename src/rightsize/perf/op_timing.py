"""A training step's time on a GPU, operation by operation, sized by each operation's shape.

perf/device_model.py's first model gives a class of operation one efficiency,
whatever its size: an fp32 matmul reaches 27% of the peak whether it is an
LSTM's 200-wide gate or BERT's 768 x 3072 projection. This model times each
operation that PyTorch dispatches (perf/op_costs.py) by what it is:

- **Matmuls, convolutions (as implicit GEMMs) and attention's matmuls** run in
  tiles of ``TILE x TILE`` output elements, one tile per streaming multiprocessor
  at a time, in waves (as NeuSight and Habitat model them): a GEMM of
  ``batch · ⌈M/T⌉ · ⌈N/T⌉`` tiles on ``S`` SMs keeps ``min(1, tiles / S)`` of
  the GPU busy — a 64 x 64 gate fills one SM of 80, BERT's projections at a real
  batch fill every wave (a partial last wave is shared out, and a long K split over
  idle SMs, as cuBLAS's stream-K and split-K kernels do). Each tile streams K in slices with a fixed prologue and
  epilogue, so a tile reaches ``K / (K + K_HALF)`` of its rate. What is left — the
  fraction of the peak a full, long GEMM reaches — is one fitted efficiency per
  (matmul or convolution) x (CUDA or tensor cores), the same on every GPU:

      t = max(F / (P · η · waves(M, N, batch; S) · K/(K + K_HALF)), bytes / (W · η_mem)) + κ

  The tile model was chosen over an efficiency that rises smoothly with arithmetic
  intensity because the tiles and waves are counted from the GPU's datasheet (its
  SM count), so a GPU nobody measured gets its own quantisation, and it leaves only
  four efficiencies to fit on ~150 published measurements.
- **Attention**, however it was written (perf/op_canon.py folds explicit matmul/softmax,
  einsum and ``scaled_dot_product_attention`` alike into one operation per phase): its
  matmuls (two forward, four backward, each with its own shape) on the tiles, plus the
  traffic of Q, K, V and the output and the score matrix's passes and kernels as BERT's
  published implementations run it unfused (:data:`ATTENTION_COSTS`, by the parts the
  sheet names: mask, dropout).
- **Layout** operations (perf/op_canon.py) cost nothing: their consumer reads the operand.
- **Everything else** (element-wise, normalisation, softmax, gathers, reductions) by
  its bytes: ``φ · bytes / (W · η_mem) + κ``, where ``φ`` is the fraction of the
  counted traffic the measured stacks really move: the CPU profile counts eager
  PyTorch's unfused kernels, the published stacks (NVIDIA's containers: fused
  bias-GeLU, LayerNorm, softmax-dropout) fuse many of them. ``φ`` is fitted with the
  rest, and is 1 before any fit.

``κ`` is the fixed cost of one kernel in eager PyTorch (launch, tail). Under AMP
every tensor moves in 16 bits (half the bytes); the optimizer's traffic is the
parameters' as in the per-class model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from rightsize.core.catalog import Accelerator
from rightsize.core.errors import SpecError
from rightsize.perf.fitted import Fitted
from rightsize.perf.op_sheet import OpCost, OpKind, OpSheet, attention_parts
from rightsize.perf.precision import OpClass, Precision, peak_flops_per_s, runs_on_tensor_cores

TILE = 128  # output elements per side of one thread block's tile (cuBLAS/cuDNN's common size)
K_HALF = 32.0  # the reduction length at which a tile reaches half its streaming rate
SPLIT_K_MIN = 256.0  # the shortest part of K a split-K GEMM gives one SM
#: Attention as BERT's published implementations run it (BertSelfAttention in NVIDIA's
#: DeepLearningExamples and Hugging Face, eager PyTorch; the measurements the model is
#: calibrated on): per part, the passes over the score matrix (forward, backward) and the
#: kernels (forward, backward). The matmuls write the scores and read the probabilities
#: (forward QK^T, PV; backward dP written, P read by dV, dS read by dQ and dK); the scale
#: reads and writes; the softmax reads and writes, its backward reads two and writes one;
#: an additive mask reads and writes (no gradient); dropout draws its mask, scales it and
#: multiplies (5 forward passes, 3 kernels), its backward multiplies (3, 1). Every way of
#: writing attention is timed so (perf/op_canon.py); a fused kernel (SDPA's
#: memory-efficient or flash attention) moves none of the score matrix: chosen against it
#: on the independent check, where fused timing raised the median absolute error from 8.8% to
#: 57% (docs/benchmarks.md).
ATTENTION_COSTS = {"matmuls": ((2, 4), (2, 4)), "scale": ((2, 2), (1, 1)),
                   "softmax": ((2, 3), (1, 1)), "mask": ((2, 0), (1, 0)),
                   "dropout": ((5, 3), (3, 1))}  # fmt: skip
#: The same parts as one fused kernel runs them (SDPA's memory-efficient or flash attention:
#: scores, mask and dropout in on-chip memory, a forward kernel and a backward with its
#: pre-processing one): no score-matrix traffic. Not the model's (see above);
#: benchmarks/plan/gpu_predictions.py --attention-timing fused measures it.
FUSED_ATTENTION_COSTS = {"matmuls": ((0, 0), (1, 2)), "scale": ((0, 0), (0, 0)),
                         "softmax": ((0, 0), (0, 0)), "mask": ((0, 0), (0, 0)),
                         "dropout": ((0, 0), (0, 0))}  # fmt: skip
SCORE_ITEMSIZE = 4  # the sheet counts in fp32; AMP halves it with every other byte
OPTIMIZER_BYTES_PER_PARAM_BYTE = 5.0  # as perf/device_model.py: SGD with momentum
AMP_CAST_BYTES_PER_PARAM_BYTE = 1.5
EFFICIENCIES_FILE = "op_efficiencies.json"
#: Efficiency slots: (matmul, conv) x (CUDA cores, tensor cores); memory-bound ops have none.
SLOTS = ("gemm_cuda", "gemm_tensor", "conv_cuda", "conv_tensor")


@dataclass(frozen=True)
class OpEfficiencies(Fitted):
    """The fitted fractions of peak of the per-operation model (provenance and held-out
    spread: :class:`~rightsize.perf.fitted.Fitted`).

    Attributes:
        compute: per slot (:data:`SLOTS`), the fraction of the peak a full, long GEMM reaches.
        memory: the fraction of the datasheet bandwidth memory-bound work reaches.
        kernel_s: the fixed cost of one kernel.
        traffic: the fraction of memory-bound kernels' counted bytes really moved.
    """

    FILE: ClassVar[str] = EFFICIENCIES_FILE
    WHAT: ClassVar[str] = "operation efficiencies"

    compute: Mapping[str, float]
    memory: float
    kernel_s: float
    traffic: float = 1.0

    def to_dict(self) -> dict:
        return {"compute": dict(self.compute), "memory": self.memory, "kernel_s": self.kernel_s,
                "traffic": self.traffic, **self.fit_dict()}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping) -> OpEfficiencies:
        """Raises: SpecError on a missing slot or a fraction outside (0, 1]."""
        try:
            compute = {s: float(data["compute"][s]) for s in SLOTS}
            memory, kernel_s = float(data["memory"]), float(data["kernel_s"])
            traffic = float(data.get("traffic", 1.0))
        except (KeyError, TypeError, ValueError) as exc:
            raise cls.missing(exc) from None
        cls.check_fractions([*compute.items(), ("memory", memory), ("traffic", traffic)])
        return cls(compute, memory, kernel_s, traffic, **cls.fit_fields(data))

    def vector(self) -> np.ndarray:
        return np.array([self.compute[s] for s in SLOTS])


def wave_fraction(tiles: float, sms: float | None) -> float:
    """The fraction of ``sms`` multiprocessors a GEMM of ``tiles`` output tiles keeps busy.

    Fewer tiles than SMs leave SMs idle. A partial last wave does not: cuBLAS and CUTLASS
    share it out over every SM (stream-K and split-K decompositions, smaller tiles), so
    with at least one full wave the GPU is counted busy throughout.
    """
    if not sms or tiles <= 0:
        return 1.0
    return min(1.0, tiles / sms)


def gemm_fraction(batch: float, m: float, n: float, k: float, sms: float | None) -> float:
    """The fraction of a full GEMM's rate a (batch, M, N, K) GEMM reaches: waves and K.

    With fewer output tiles than SMs, a long K is split over the idle SMs (split-K, each
    part at least ``SPLIT_K_MIN`` long): a weight gradient's 768 x 768 output over 4096
    tokens fills a GPU that its 36 tiles alone would leave three-quarters idle.
    """
    tiles = max(1.0, round(batch)) * math.ceil(max(m, 1) / TILE) * math.ceil(max(n, 1) / TILE)
    splits = 1.0
    if sms and tiles < sms:
        splits = max(1.0, min(sms / tiles, k / SPLIT_K_MIN))
    part = k / splits
    return wave_fraction(tiles * splits, sms) * part / (part + K_HALF)


def attention_gemms(heads: float, sq: float, skv: float, d: float,
                    phase: str) -> list[tuple[float, float, float, float]]:  # fmt: skip
    """The matmuls of unfused attention: forward QK^T and PV; backward dP, dV, dQ, dK."""
    if phase == "forward":
        return [(heads, sq, skv, d), (heads, sq, d, skv)]
    return [(heads, sq, skv, d), (heads, skv, d, sq), (heads, sq, d, skv), (heads, skv, d, sq)]


def _attention_cost(op: OpCost, which: int) -> int:
    """Score passes (``which`` 0) or kernels (1) of one attention in its phase."""
    parts = {"matmuls", "scale", "softmax"} | attention_parts(op.name)
    phase = 0 if op.phase == "forward" else 1
    return sum(ATTENTION_COSTS[p][which][phase] for p in parts)


def kernels_of(op: OpCost) -> int:
    """Kernels one of ``op`` launches: attention's unfused few, none for a re-layout."""
    if op.kind is OpKind.ATTENTION:
        return _attention_cost(op, 1)
    return 0 if op.kind is OpKind.LAYOUT else 1


@dataclass(frozen=True)
class TimedRows:
    """One step's operations at one batch on one GPU, as arrays: each row a GEMM or a
    memory-bound kernel, ``slot`` its efficiency (-1: memory only). A fit evaluates a step
    thousands of times; these make it a few vector operations."""

    flops: np.ndarray
    moved: np.ndarray
    rate: np.ndarray  # peak FLOP/s x the shape's fraction
    slot: np.ndarray
    kernels: float
    optimizer_bytes: float
    bandwidth: float
    phase: np.ndarray  # 0 forward, 1 backward
    kind: tuple[str, ...]
    op: np.ndarray  # each row's operation: its index in the sheet

    def compute_s(self, compute: np.ndarray) -> np.ndarray:
        """Each row's arithmetic time on its peak at its shape's fraction (0 for memory rows)."""
        eff = np.where(self.slot >= 0, compute[np.maximum(self.slot, 0)], 1.0)
        return np.where(self.slot >= 0, self.flops / (self.rate * eff), 0.0)

    def seconds(self, compute: np.ndarray, memory: float, kernel_s: float,
                traffic: float = 1.0) -> np.ndarray:  # fmt: skip
        """Each row's time (without kernel costs): its arithmetic or its traffic."""
        moved = np.where(self.slot >= 0, self.moved, self.moved * traffic)
        return np.maximum(self.compute_s(compute), moved / (self.bandwidth * memory))

    def total_s(self, compute: np.ndarray, memory: float, kernel_s: float,
                traffic: float = 1.0) -> float:  # fmt: skip
        return float(self.seconds(compute, memory, kernel_s, traffic).sum()
                     + self.kernels * kernel_s + self.optimizer_bytes / (self.bandwidth * memory))  # fmt: skip


def _slot(kind: OpKind, acc: Accelerator, precision: Precision) -> tuple[int, float]:
    op_class = OpClass.CONV if kind is OpKind.CONV else OpClass.MATMUL
    tensor = runs_on_tensor_cores(acc, precision, op_class)
    base = 2 if kind is OpKind.CONV else 0
    return base + (1 if tensor else 0), peak_flops_per_s(acc, precision, op_class)


def timed_rows(sheet: OpSheet, param_bytes: float, acc: Accelerator, precision: Precision,
               batch: float) -> TimedRows:  # fmt: skip
    """The arrays :meth:`TimedRows.total_s` times (see the module docstring)."""
    act = precision.activation_bytes_factor
    flops, moved, rate, slot, phase, kinds, index = [], [], [], [], [], [], []
    kernels = 0.0
    sms = acc.sm_count

    def row(f, b, r, s, at: int) -> None:
        op = sheet.ops[at]
        flops.append(f), moved.append(b), rate.append(r), slot.append(s)
        phase.append(0 if op.phase == "forward" else 1), kinds.append(op.kind.value)
        index.append(at)

    for i, op in enumerate(sheet.ops):
        n = op.count
        total_flops, total_bytes = n * op.flops.at(batch), n * op.bytes.at(batch) * act
        dims = [d.at(batch) for d in op.gemm]
        if op.kind is OpKind.ATTENTION:
            s, peak = _slot(op.kind, acc, precision)
            gemms = attention_gemms(*dims, op.phase)
            for g in gemms:
                row(total_flops / len(gemms), 0.0, peak * gemm_fraction(*g, sms), s, i)
            heads, sq, skv, _ = dims
            scores = n * _attention_cost(op, 0) * heads * sq * skv * SCORE_ITEMSIZE * act
            row(0.0, total_bytes + scores, 1.0, -1, i)
        elif op.kind is OpKind.LAYOUT:
            continue  # perf/op_canon.py: re-layout, read strided by its consumer
        elif op.kind.matmul_like and total_flops > 0:
            s, peak = _slot(op.kind, acc, precision)
            row(total_flops, total_bytes, peak * gemm_fraction(*dims, sms), s, i)
        else:
            row(0.0, total_bytes, 1.0, -1, i)
        kernels += n * kernels_of(op)
    optimizer = OPTIMIZER_BYTES_PER_PARAM_BYTE * param_bytes
    if precision is Precision.AMP:
        optimizer += AMP_CAST_BYTES_PER_PARAM_BYTE * param_bytes
    return TimedRows(np.array(flops), np.array(moved), np.array(rate), np.array(slot, dtype=int),
                     kernels, optimizer, acc.mem_bandwidth_gbs * 1e9, np.array(phase),
                     tuple(kinds), np.array(index, dtype=int))  # fmt: skip


def op_seconds(sheet: OpSheet, param_bytes: float, acc: Accelerator, precision: Precision,
               batch: float, eff: OpEfficiencies) -> list[float]:  # fmt: skip
    """Each operation's time in the step (all ``count`` of it, kernel costs included), in the
    sheet's order: where a step's time goes (benchmarks/plan/gpu_variants.py)."""
    rows = timed_rows(sheet, param_bytes, acc, precision, batch)
    seconds = rows.seconds(eff.vector(), eff.memory, eff.kernel_s, eff.traffic)
    per_op = np.bincount(rows.op, weights=seconds, minlength=len(sheet.ops))
    return [float(s) + op.count * kernels_of(op) * eff.kernel_s
            for s, op in zip(per_op, sheet.ops, strict=True)]


@dataclass(frozen=True)
class StepTime:
    """One predicted step, split the way the model computed it (by operation class or kind;
    both device models return it)."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    by_class_s: Mapping[str, float]

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s


def op_step_time(sheet: OpSheet, param_bytes: float, acc: Accelerator, precision: Precision,
                 batch: float, eff: OpEfficiencies) -> StepTime:  # fmt: skip
    """One training step at per-device batch ``batch``, split into forward, backward and the
    optimizer (kernel costs shared out by each phase's kernels).

    Raises:
        SpecError: a batch that is not positive.
    """
    if batch <= 0:
        raise SpecError(f"batch must be positive, got {batch}")
    rows = timed_rows(sheet, param_bytes, acc, precision, batch)
    seconds = rows.seconds(eff.vector(), eff.memory, eff.kernel_s, eff.traffic)
    by_kind: dict[str, float] = {}
    for kind, s in zip(rows.kind, seconds, strict=True):
        by_kind[kind] = by_kind.get(kind, 0.0) + float(s)
    forward_kernels = sum(op.count * kernels_of(op) for op in sheet.ops if op.phase == "forward")
    forward = float(seconds[rows.phase == 0].sum()) + forward_kernels * eff.kernel_s
    backward = (float(seconds[rows.phase == 1].sum())
                + (rows.kernels - forward_kernels) * eff.kernel_s)  # fmt: skip
    by_kind["kernels"] = rows.kernels * eff.kernel_s
    optimizer = rows.optimizer_bytes / (rows.bandwidth * eff.memory)
    by_kind["optimizer"] = optimizer
    return StepTime(forward, backward, optimizer, by_kind)
