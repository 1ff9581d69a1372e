"""An operation sheet: every operation of one training step, its costs lines in the batch.

The data half of perf/op_costs.py, without torch: profiles carry a sheet and the device
model (perf/op_timing.py) times one, and neither may import torch to do it (a ``--help``
or a plan from a saved profile never loads torch; tests/test_cli.py). Counting a model's
operations, which needs torch, is perf/op_costs.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OpKind(StrEnum):
    GEMM = "gemm"  # mm, addmm, bmm, baddbmm
    RNN = "rnn"  # a fused recurrent layer (oneDNN's on the CPU, cuDNN's on a GPU)
    CONV = "conv"  # convolution and its backward
    ATTENTION = "attention"  # fused scaled-dot-product attention
    NORM = "norm"  # batch/layer/group norm and their backward
    SOFTMAX = "softmax"
    EMBEDDING = "embedding"  # table gathers and their scatter-add backward
    REDUCTION = "reduction"  # sums, means, norms over dimensions
    ELEMENTWISE = "elementwise"  # everything else that moves memory
    LAYOUT = "layout"  # a copy or a view's gradient that only re-lays out (perf/op_canon.py)

    @property
    def matmul_like(self) -> bool:
        return self in (OpKind.GEMM, OpKind.CONV, OpKind.ATTENTION, OpKind.RNN)


#: An attention's name in a sheet says what its score matrix went through besides the
#: softmax and the scale (perf/op_canon.py names it, perf/op_timing.py times it by it).
ATTENTION = "attention"
ATTENTION_PARTS = ("mask", "dropout")


def attention_name(masked: bool, dropout: bool) -> str:
    """``attention``, ``attention+mask``, ``attention+dropout`` or ``attention+mask+dropout``."""
    return "+".join([ATTENTION, *(p for p, on in zip(ATTENTION_PARTS, (masked, dropout),
                                                    strict=True) if on)])  # fmt: skip


def attention_parts(name: str) -> frozenset[str]:
    """The parts an attention's name carries (none for a fused kernel's own name)."""
    return frozenset(p for p in name.split("+")[1:] if p in ATTENTION_PARTS)


@dataclass(frozen=True)
class OpRecord:
    """One dispatched operation at one batch size (perf/op_costs.py records them)."""

    name: str
    kind: OpKind
    phase: str  # "forward" or "backward"
    flops: float
    bytes: float
    gemm: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # batch, M, N, K
    #: What perf/op_canon.py needs to see which operations belong together: the storages read
    #: (key, bytes, dimensions) and written, and the largest tensor's shape and element size.
    reads: tuple[tuple[int, float, int], ...] = ()
    writes: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    itemsize: int = 4


@dataclass(frozen=True)
class Linear:
    """A quantity that is a line in the batch size: ``fixed + per_sample · B``."""

    fixed: float
    per_sample: float

    def at(self, batch: float) -> float:
        return max(0.0, self.fixed + self.per_sample * batch)

    @classmethod
    def through(cls, small: float, large: float, batch: int) -> Linear:
        """The line through ``small`` at ``batch`` and ``large`` at ``2 · batch``."""
        per_sample = (large - small) / batch
        return cls(small - per_sample * batch, per_sample)


@dataclass(frozen=True)
class OpCost:
    """One kind of operation of a step, ``count`` times, with its costs as lines in the batch."""

    name: str
    kind: OpKind
    phase: str
    count: int
    flops: Linear
    bytes: Linear
    gemm: tuple[Linear, Linear, Linear, Linear]  # batch, M, N, K

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind.value, "phase": self.phase,
                "count": self.count, "flops": [self.flops.fixed, self.flops.per_sample],
                "bytes": [self.bytes.fixed, self.bytes.per_sample],
                "gemm": [[d.fixed, d.per_sample] for d in self.gemm]}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> OpCost:
        return cls(str(data["name"]), OpKind(data["kind"]), str(data["phase"]),
                   int(data["count"]), Linear(*data["flops"]), Linear(*data["bytes"]),
                   tuple(Linear(*d) for d in data["gemm"]))  # fmt: skip


@dataclass(frozen=True)
class OpSheet:
    """Every operation of one training step (forward and backward), batch-scalable."""

    ops: tuple[OpCost, ...]

    @classmethod
    def from_records(cls, small: list[OpRecord], large: list[OpRecord], batch: int) -> OpSheet:
        """Lines through the operations counted at ``batch`` (``small``) and ``2 · batch``.

        Raises:
            ValueError: the two passes dispatched different operations (a model whose graph
                depends on the batch size).
        """
        if [(r.name, r.phase) for r in small] != [(r.name, r.phase) for r in large]:
            raise ValueError("the step dispatches different operations at different batches")
        grouped: dict[tuple, int] = {}
        for a, b in zip(small, large, strict=True):
            key = (a.name, a.kind, a.phase, Linear.through(a.flops, b.flops, batch),
                   Linear.through(a.bytes, b.bytes, batch),
                   tuple(Linear.through(x, y, batch) for x, y in zip(a.gemm, b.gemm, strict=True)))  # fmt: skip
            grouped[key] = grouped.get(key, 0) + 1
        return cls(tuple(OpCost(name, kind, phase, count, flops, moved, gemm)
                         for (name, kind, phase, flops, moved, gemm), count in grouped.items()))  # fmt: skip

    def flops(self, batch: float, phase: str | None = None) -> float:
        return sum(op.count * op.flops.at(batch) for op in self.ops
                   if phase in (None, op.phase))  # fmt: skip

    def bytes(self, batch: float) -> float:
        return sum(op.count * op.bytes.at(batch) for op in self.ops)

    @property
    def kernels(self) -> int:
        return sum(op.count for op in self.ops)

    def to_list(self) -> list[dict]:
        return [op.to_dict() for op in self.ops]

    @classmethod
    def from_list(cls, data: list[dict]) -> OpSheet:
        return cls(tuple(OpCost.from_dict(d) for d in data))
