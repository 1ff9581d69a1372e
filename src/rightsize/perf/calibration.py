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

from rightsize.core.catalog import Accelerator
from rightsize.perf.device_model import TENSOR_CLASSES, CostSheet, Efficiencies, step_time
from rightsize.perf.precision import Precision

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

    @property
    def key(self) -> tuple[str, int, Precision]:
        return self.model, self.batch, self.precision


def predicted_samples_per_s(m: Measurement, eff: Efficiencies) -> float:
    return m.batch / step_time(m.sheet, m.accelerator, m.precision, m.batch, eff).total_s


def _pack(eff: Efficiencies) -> list[float]:
    return ([math.log(eff.cuda_core[c]) for c in TENSOR_CLASSES]
            + [math.log(eff.tensor_core[c]) for c in TENSOR_CLASSES]
            + [math.log(eff.memory), math.log(eff.kernel_s)])  # fmt: skip


def _unpack(x: Sequence[float], source: str) -> Efficiencies:
    n = len(TENSOR_CLASSES)
    cuda = {c: min(1.0, math.exp(v)) for c, v in zip(TENSOR_CLASSES, x[:n], strict=True)}
    tensor = {c: min(1.0, math.exp(v)) for c, v in zip(TENSOR_CLASSES, x[n:2 * n], strict=True)}
    return Efficiencies(cuda, tensor, min(1.0, math.exp(x[2 * n])), math.exp(x[2 * n + 1]),
                        source=source)  # fmt: skip


def fit(measurements: Sequence[Measurement], prior: Efficiencies = PRIOR,
        prior_weight: float = PRIOR_WEIGHT, source: str = "") -> Efficiencies:  # fmt: skip
    """The efficiencies that best explain ``measurements`` (least squares in log throughput).

    Raises:
        ValueError: no measurements.
    """
    from scipy.optimize import least_squares  # a second's import; only fitting needs it

    if not measurements:
        raise ValueError("fitting the device model needs at least one measurement")
    start = _pack(prior)
    upper = [0.0] * (2 * len(TENSOR_CLASSES) + 1) + [math.log(1e-3)]  # fractions <= 1

    def residuals(x):
        eff = _unpack(x, source)
        misses = [math.log(predicted_samples_per_s(m, eff) / m.samples_per_s)
                  for m in measurements]  # fmt: skip
        pull = [math.sqrt(prior_weight) * (a - b) for a, b in zip(x, start, strict=True)]
        return misses + pull

    lower = [math.log(1e-3)] * (2 * len(TENSOR_CLASSES) + 1) + [math.log(1e-8)]
    result = least_squares(residuals, start, bounds=(lower, upper), x_scale=1.0)
    return _unpack(result.x, source)


def absolute_errors(measurements: Sequence[Measurement], eff: Efficiencies) -> list[float]:
    """|predicted / measured − 1| per measurement."""
    return [abs(predicted_samples_per_s(m, eff) / m.samples_per_s - 1) for m in measurements]


def ratio_errors(measurements: Sequence[Measurement], eff: Efficiencies) -> list[float]:
    """|predicted ratio / measured ratio − 1| over every pair of GPUs that ran the same model at
    the same batch and precision."""
    errors = []
    for a, b in _gpu_pairs(measurements):
        measured = a.samples_per_s / b.samples_per_s
        predicted = predicted_samples_per_s(a, eff) / predicted_samples_per_s(b, eff)
        errors.append(abs(predicted / measured - 1))
    return errors


def _gpu_pairs(measurements: Sequence[Measurement]):
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(m.key, []).append(m)
    for group in groups.values():
        for a, b in itertools.combinations(group, 2):
            if a.accelerator.name != b.accelerator.name:
                yield a, b


@dataclass(frozen=True)
class HeldOut:
    """Errors on data a fit did not see: one fold per held-out group."""

    by: str  # "gpu" or "model"
    absolute: tuple[float, ...]
    ratio: tuple[float, ...]
    log_errors: tuple[float, ...]

    def summary(self) -> dict:
        return {
            "held_out_by": self.by,
            "n": len(self.absolute),
            "absolute_median": _median(self.absolute),
            "absolute_p80": _quantile(self.absolute, 0.8),
            "ratio_pairs": len(self.ratio),
            "ratio_median": _median(self.ratio),
            "ratio_p80": _quantile(self.ratio, 0.8),
        }


def leave_one_out(measurements: Sequence[Measurement], by: str,
                  fitter: Callable[[Sequence[Measurement]], Efficiencies] = fit) -> HeldOut:  # fmt: skip
    """Fit without each GPU (``by="gpu"``) or model (``"model"``) and predict it.

    The ratio errors are those of pairs with the held-out GPU in them (``gpu``), or of the
    held-out model's pairs (``model``): each pair is predicted by a fit that saw neither side
    of what is being tested.
    """
    group_of = {"gpu": lambda m: m.accelerator.name, "model": lambda m: m.model}[by]
    absolute, ratio, logs = [], [], []
    for group in sorted({group_of(m) for m in measurements}):
        held = [m for m in measurements if group_of(m) == group]
        seen = [m for m in measurements if group_of(m) != group]
        if not seen:
            continue
        eff = fitter(seen)
        absolute += absolute_errors(held, eff)
        logs += [math.log(predicted_samples_per_s(m, eff) / m.samples_per_s) for m in held]
        pairs = [(a, b) for a, b in _gpu_pairs(measurements)
                 if group in (group_of(a), group_of(b))]  # fmt: skip
        for a, b in pairs:
            measured = a.samples_per_s / b.samples_per_s
            ratio.append(abs(predicted_samples_per_s(a, eff) / predicted_samples_per_s(b, eff)
                             / measured - 1))  # fmt: skip
    return HeldOut(by, tuple(absolute), tuple(ratio), tuple(logs))


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
