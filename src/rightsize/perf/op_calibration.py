"""Fitting the per-operation device model (perf/op_timing.py) to published measurements.

The same procedure as perf/calibration.py's for the per-class model — robust least
squares in log throughput, a weak pull towards a prior — over the per-operation
model's seven numbers: the fraction of the peak a full, long GEMM reaches on the CUDA
and on the tensor cores, the same for convolutions, the memory efficiency, the
cost of one kernel and the fraction of the memory-bound kernels' counted traffic
the measured (partly fused) stacks move. Errors are computed with perf/calibration.py's functions,
given :func:`predicted_samples_per_s` as the predictor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rightsize.perf.calibration import REFERENCE_MAX, ROBUST_SCALE, Measurement
from rightsize.perf.op_timing import SLOTS, OpEfficiencies, TimedRows, timed_rows

#: Where a fit starts and what it is pulled towards: a long GEMM reaches about half of the
#: CUDA cores' peak in eager fp32 training and less of the tensor cores'; memory-bound
#: kernels ~70% of the datasheet bandwidth; a kernel ~5 µs through eager PyTorch.
PRIOR = OpEfficiencies(
    {"gemm_cuda": 0.6, "gemm_tensor": 0.5, "conv_cuda": 0.6, "conv_tensor": 0.5},
    memory=0.7, kernel_s=5e-6, source="prior (no fit)",
)  # fmt: skip
PRIOR_WEIGHT = 0.05


def _rows(m: Measurement) -> TimedRows:
    if m.ops is None:
        raise ValueError(f"{m.model}: no operations counted for the per-operation model")
    return timed_rows(m.ops, m.sheet.param_bytes, m.accelerator, m.precision, m.batch)


def predicted_samples_per_s(m: Measurement, eff: OpEfficiencies) -> float:
    seconds = _rows(m).total_s(eff.vector(), eff.memory, eff.kernel_s, eff.traffic)
    return m.batch / seconds * eff.stack_factor(m.reference)


def _pack(eff: OpEfficiencies) -> list[float]:
    return [*(math.log(eff.compute[s]) for s in SLOTS), math.log(eff.memory),
            math.log(eff.traffic), math.log(eff.kernel_s), math.log(eff.reference_speedup)]  # fmt: skip


def _unpack(x: Sequence[float], source: str) -> OpEfficiencies:
    n = len(SLOTS)
    compute = {s: min(1.0, math.exp(v)) for s, v in zip(SLOTS, x[:n], strict=True)}
    return OpEfficiencies(compute, min(1.0, math.exp(x[n])), math.exp(x[n + 2]), source=source,
                          traffic=min(1.0, math.exp(x[n + 1])),
                          reference_speedup=math.exp(x[n + 3]))  # fmt: skip


def fit(measurements: Sequence[Measurement], prior: OpEfficiencies = PRIOR,
        prior_weight: float = PRIOR_WEIGHT, source: str = "",
        loss: str = "soft_l1") -> OpEfficiencies:  # fmt: skip
    """The efficiencies that best explain ``measurements`` (each with its ``ops``).

    Raises:
        ValueError: no measurements, or one without counted operations.
    """
    import numpy as np
    from scipy.optimize import least_squares

    if not measurements:
        raise ValueError("fitting the device model needs at least one measurement")
    start = _pack(prior)
    prepared = [(_rows(m), m.batch, m.samples_per_s, m.reference) for m in measurements]

    def residuals(x):
        n = len(SLOTS)
        compute = np.exp(np.minimum(x[:n], 0.0))
        memory, traffic = math.exp(min(x[n], 0.0)), math.exp(min(x[n + 1], 0.0))
        kernel_s, speedup = math.exp(x[n + 2]), math.exp(x[n + 3])
        misses = [math.log(batch / rows.total_s(compute, memory, kernel_s, traffic)
                           * (speedup if reference else 1.0) / measured)
                  for rows, batch, measured, reference in prepared]  # fmt: skip
        pull = [math.sqrt(prior_weight) * (a - b) for a, b in zip(x, start, strict=True)]
        return misses + pull

    n = len(SLOTS) + 2  # fractions, then the kernel's cost and the reference stacks' speed-up
    lower = [math.log(1e-3)] * n + [math.log(1e-8), -math.log(REFERENCE_MAX)]
    upper = [0.0] * n + [math.log(1e-3), math.log(REFERENCE_MAX)]
    result = least_squares(residuals, start, bounds=(lower, upper), loss=loss,
                           f_scale=ROBUST_SCALE)  # fmt: skip
    return _unpack(result.x, source)
