"""Fitting the device model's efficiencies to published training measurements, and its errors.

perf/device_model.py predicts a step from a model's counted costs and a GPU's
datasheet; what it cannot count — the fraction of each peak real kernels reach,
the cost of a kernel — is fitted here, once, on measurements others published
(benchmarks/data/measured/). The fit minimises the squared log error of the
predicted samples per second, so a 2x miss weighs the same on a K80 as on an
H100, with a weak pull towards the prior (the shipped or default values) for
any efficiency the data do not constrain (no attention on tensor cores, say).

Errors are reported as the issue asks: absolute (|predicted / measured - 1|) and
of the ratio between two GPUs for the same model, batch and precision — the
number that decides which instance wins — each held out: leave one GPU out, and
leave one model out.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rightsize.core.catalog import Accelerator
from rightsize.perf.device_model import (
    AMP_CAST_BYTES_PER_PARAM_BYTE,
    KERNELS_PER_LAYER,
    OPTIMIZER_BYTES_PER_PARAM_BYTE,
    TENSOR_CLASSES,
    CostSheet,
    Efficiencies,
    step_time,
)
from rightsize.perf.op_sheet import OpSheet
from rightsize.perf.precision import Precision, peak_flops_per_s, runs_on_tensor_cores

#: The efficiencies a fit starts from and is pulled towards: fp32 training reaches about a
#: third to a half of the CUDA cores' peak, tensor cores less of theirs; memory-bound work
#: about 70% of the datasheet bandwidth; a kernel costs ~5 µs through eager PyTorch.
PRIOR = Efficiencies(
    cuda_core={c: 0.5 for c in TENSOR_CLASSES},
    tensor_core={c: 0.3 for c in TENSOR_CLASSES},
    memory=0.7,
    kernel_s=5e-6,
    source="prior (no fit)",
)
PRIOR_WEIGHT = 0.05  # per parameter, against one measurement's squared log error
SPREAD_QUANTILE = 0.8  # the interval covers 80% of held-out errors
#: Misses beyond ~20% (in log throughput) weigh linearly, not quadratically: published tables
#: carry rows no counted model explains (Gavel's ResNet-18 at batch 128 trains 4x slower per
#: sample than at 64), and one such row should not pull every GPU's efficiencies.
ROBUST_SCALE = 0.2
#: The reference stacks' speed-up is fitted within [1/4, 4]: any real one is well inside.
REFERENCE_MAX = 4.0


@dataclass(frozen=True)
class Measurement:
    """One published throughput of a model on one GPU."""

    model: str
    sheet: CostSheet
    accelerator: Accelerator
    precision: Precision
    batch: int
    samples_per_s: float
    source: str = ""
    ops: OpSheet | None = None  # the step's operations, for the per-operation model
    reference: bool = False  # measured with NVIDIA's reference implementations (Fitted)

    @property
    def key(self) -> tuple[str, int, Precision]:
        return self.model, self.batch, self.precision


def predicted_samples_per_s(m: Measurement, eff: Efficiencies) -> float:
    step = step_time(m.sheet, m.accelerator, m.precision, m.batch, eff)
    return m.batch / step.total_s * eff.stack_factor(m.reference)


@dataclass(frozen=True)
class _Prepared:
    """One measurement's step as arrays over (phase, layer), so that a fit evaluates
    :func:`step_time` in a few vector operations (a fit evaluates it ~10^5 times).

    ``slot`` indexes the efficiency vector (:func:`_efficiency_vector`); the last slot is 1.0,
    for memory-bound classes' FLOPs, which run at the plain fp32 peak.
    """

    flops: np.ndarray
    moved: np.ndarray
    peak: np.ndarray
    slot: np.ndarray
    kernels: float
    optimizer_bytes: float
    bandwidth: float
    batch: int
    samples_per_s: float
    reference: bool


def _prepare(m: Measurement) -> _Prepared:
    acc, precision, batch = m.accelerator, m.precision, m.batch
    act = precision.activation_bytes_factor
    n = len(TENSOR_CLASSES)
    flops, moved, peak, slot = [], [], [], []
    for backward in (False, True):
        for layer in m.sheet.layers:
            flops.append((layer.backward_flops if backward else layer.forward_flops) * batch)
            moved.append(layer.param_bytes * (3 if backward else 1)
                         + (3 if backward else 2) * layer.output_bytes * act * batch)  # fmt: skip
            # memory-bound classes' few FLOPs: the CUDA cores' rate, at the last slot's 1.0
            peak.append(peak_flops_per_s(acc, precision, layer.op_class))
            if layer.op_class.uses_tensor_cores:
                tensor = runs_on_tensor_cores(acc, precision, layer.op_class)
                slot.append(TENSOR_CLASSES.index(layer.op_class) + (n if tensor else 0))
            else:
                slot.append(2 * n)
    kernels = sum(KERNELS_PER_LAYER.values()) * len(m.sheet.layers)
    opt = OPTIMIZER_BYTES_PER_PARAM_BYTE * m.sheet.param_bytes
    if precision is Precision.AMP:
        opt += AMP_CAST_BYTES_PER_PARAM_BYTE * m.sheet.param_bytes
    return _Prepared(np.array(flops), np.array(moved), np.array(peak), np.array(slot), kernels,
                     opt, acc.mem_bandwidth_gbs * 1e9, batch, m.samples_per_s,
                     m.reference)  # fmt: skip


def _efficiency_vector(eff: Efficiencies) -> np.ndarray:
    return np.array([*(eff.cuda_core[c] for c in TENSOR_CLASSES),
                     *(eff.tensor_core[c] for c in TENSOR_CLASSES), 1.0])  # fmt: skip


def _fast_samples_per_s(p: _Prepared, vector: np.ndarray, memory: float, kernel_s: float) -> float:
    bandwidth = p.bandwidth * memory
    compute = p.flops / (p.peak * vector[p.slot])
    seconds = np.maximum(compute, p.moved / bandwidth).sum()
    return p.batch / (seconds + p.kernels * kernel_s + p.optimizer_bytes / bandwidth)


def _pack(eff: Efficiencies) -> list[float]:
    return ([math.log(eff.cuda_core[c]) for c in TENSOR_CLASSES]
            + [math.log(eff.tensor_core[c]) for c in TENSOR_CLASSES]
            + [math.log(eff.memory), math.log(eff.kernel_s), math.log(eff.reference_speedup)])  # fmt: skip


def _unpack(x: Sequence[float], source: str) -> Efficiencies:
    n = len(TENSOR_CLASSES)
    cuda = {c: min(1.0, math.exp(v)) for c, v in zip(TENSOR_CLASSES, x[:n], strict=True)}
    tensor = {c: min(1.0, math.exp(v)) for c, v in zip(TENSOR_CLASSES, x[n:2 * n], strict=True)}
    return Efficiencies(cuda, tensor, min(1.0, math.exp(x[2 * n])), math.exp(x[2 * n + 1]),
                        source=source, reference_speedup=math.exp(x[2 * n + 2]))  # fmt: skip


def fit(measurements: Sequence[Measurement], prior: Efficiencies = PRIOR,
        prior_weight: float = PRIOR_WEIGHT, source: str = "",
        loss: str = "soft_l1") -> Efficiencies:  # fmt: skip
    """The efficiencies that best explain ``measurements`` (least squares in log throughput;
    ``loss="soft_l1"``, the default, is robust to outliers, ``"linear"`` plain least squares).

    Raises:
        ValueError: no measurements.
    """
    from scipy.optimize import least_squares  # a second's import; only fitting needs it

    if not measurements:
        raise ValueError("fitting the device model needs at least one measurement")
    start = _pack(prior)
    # fractions <= 1, then the kernel's cost and the reference stacks' speed-up
    upper = [0.0] * (2 * len(TENSOR_CLASSES) + 1) + [math.log(1e-3), math.log(REFERENCE_MAX)]
    prepared = [_prepare(m) for m in measurements]

    def residuals(x):
        eff = _unpack(x, source)
        vector = _efficiency_vector(eff)
        misses = [math.log(_fast_samples_per_s(p, vector, eff.memory, eff.kernel_s)
                           * eff.stack_factor(p.reference) / p.samples_per_s)
                  for p in prepared]  # fmt: skip
        pull = [math.sqrt(prior_weight) * (a - b) for a, b in zip(x, start, strict=True)]
        return misses + pull

    lower = ([math.log(1e-3)] * (2 * len(TENSOR_CLASSES) + 1)
             + [math.log(1e-8), -math.log(REFERENCE_MAX)])  # fmt: skip
    result = least_squares(residuals, start, bounds=(lower, upper), x_scale=1.0, loss=loss,
                           f_scale=ROBUST_SCALE)
    return _unpack(result.x, source)


#: A model's prediction of a measurement with some fitted numbers (this module's per-class
#: model, or perf/op_calibration.py's per-operation one).
Predictor = Callable[[Measurement, object], float]


def absolute_errors(measurements: Sequence[Measurement], eff,
                    predict: Predictor = predicted_samples_per_s) -> list[float]:  # fmt: skip
    """|predicted / measured − 1| per measurement."""
    return [abs(predict(m, eff) / m.samples_per_s - 1) for m in measurements]


def ratio_errors(measurements: Sequence[Measurement], eff, same_source: bool = True,
                 predict: Predictor = predicted_samples_per_s,
                 same_batch: bool = True) -> list[float]:  # fmt: skip
    """|predicted ratio / measured ratio − 1| over every pair of GPUs that ran the same model in
    the same precision — measured by one source (``same_source``, the default: a ratio of one
    software stack on two GPUs, which is what decides between instances), or by any two (a
    ratio that also carries the sources' differences: ~20% apart on the same GPU,
    benchmarks/plan/source_agreement.py); at the same batch (``same_batch``), or each GPU at
    the batch its source ran (its largest, where it ran several): the comparison a user
    makes, which admits the sources that run each GPU at its own batch."""
    return [_ratio_error(a, b, eff, predict)
            for a, b in _gpu_pairs(measurements, same_source, same_batch)]  # fmt: skip


def _ratio_error(a: Measurement, b: Measurement, eff,
                 predict: Predictor = predicted_samples_per_s) -> float:  # fmt: skip
    measured = a.samples_per_s / b.samples_per_s
    predicted = predict(a, eff) / predict(b, eff)
    return abs(predicted / measured - 1)


def _gpu_pairs(measurements: Sequence[Measurement], same_source: bool = True,
               same_batch: bool = True):  # fmt: skip
    if not same_batch:  # each GPU at its source's largest batch
        largest: dict[tuple, Measurement] = {}
        for m in measurements:
            key = (m.model, m.precision, m.source, m.accelerator.name)
            if key not in largest or m.batch > largest[key].batch:
                largest[key] = m
        measurements = list(largest.values())
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements:
        key = m.key if same_batch else (m.model, m.precision)
        groups.setdefault((*key, m.source) if same_source else key, []).append(m)
    for group in groups.values():
        for a, b in itertools.combinations(group, 2):
            if a.accelerator.name != b.accelerator.name:
                yield a, b


@dataclass(frozen=True)
class HeldOut:
    """Errors on data a fit did not see: one fold per held-out group."""

    by: str  # "gpu", "model" or "source"
    absolute: tuple[float, ...]
    ratio: tuple[float, ...]  # pairs measured by one source
    log_errors: tuple[float, ...]
    groups: tuple[str, ...] = ()  # the held-out group of each absolute error
    ratio_any_source: tuple[float, ...] = ()  # pairs of any two sources
    ratio_own_batch: tuple[float, ...] = ()  # one source's pairs, each GPU at its own batch

    def summary(self) -> dict:
        return {
            "held_out_by": self.by,
            "n": len(self.absolute),
            "absolute_median": _median(self.absolute),
            "absolute_p80": _quantile(self.absolute, 0.8),
            "ratio_pairs": len(self.ratio),
            "ratio_median": _median(self.ratio),
            "ratio_p80": _quantile(self.ratio, 0.8),
            "ratio_p90": _quantile(self.ratio, 0.9),
            "ratio_own_batch_pairs": len(self.ratio_own_batch),
            "ratio_own_batch_median": _median(self.ratio_own_batch),
            "ratio_own_batch_p90": _quantile(self.ratio_own_batch, 0.9),
            "absolute_p90": _quantile(self.absolute, 0.9),
            "ratio_any_source_pairs": len(self.ratio_any_source),
            "ratio_any_source_median": _median(self.ratio_any_source),
            "absolute_median_by_group": {
                g: _median([e for e, h in zip(self.absolute, self.groups, strict=True) if h == g])
                for g in sorted(set(self.groups))
            },
        }


def leave_one_out(measurements: Sequence[Measurement], by: str,
                  fitter: Callable[[Sequence[Measurement]], object] = fit,
                  predict: Predictor = predicted_samples_per_s) -> HeldOut:  # fmt: skip
    """Fit without each GPU (``by="gpu"``), model (``"model"``) or source (``"source"``: one
    publisher's rows, its software stack) and predict it.

    The ratio errors are those of pairs with the held-out GPU in them (``gpu``), or of the
    held-out model's pairs (``model``): each pair is predicted by a fit that saw neither side
    of what is being tested.
    """
    group_of = {"gpu": lambda m: m.accelerator.name, "model": lambda m: m.model,
                "source": lambda m: m.source}[by]  # fmt: skip
    absolute, ratio, logs, groups, any_source, own_batch = [], [], [], [], [], []
    for group in sorted({group_of(m) for m in measurements}):
        held = [m for m in measurements if group_of(m) == group]
        seen = [m for m in measurements if group_of(m) != group]
        if not seen:
            continue
        eff = fitter(seen)
        absolute += absolute_errors(held, eff, predict)
        groups += [group] * len(held)
        logs += [math.log(predict(m, eff) / m.samples_per_s) for m in held]
        for same_source, same_batch, errors in ((True, True, ratio), (False, True, any_source),
                                                (True, False, own_batch)):  # fmt: skip
            errors += [_ratio_error(a, b, eff, predict)
                       for a, b in _gpu_pairs(measurements, same_source, same_batch)
                       if group in (group_of(a), group_of(b))]  # fmt: skip
    return HeldOut(by, tuple(absolute), tuple(ratio), tuple(logs), tuple(groups),
                   tuple(any_source), tuple(own_batch))  # fmt: skip


def log_spread(held_out: HeldOut, quantile: float = SPREAD_QUANTILE) -> float:
    """The |log error| ``quantile`` of held-out predictions covers: the interval's half-width."""
    return _quantile([abs(e) for e in held_out.log_errors], quantile)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
