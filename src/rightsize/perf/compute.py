"""Srift's compute-latency model: piecewise-linear forward/backward time in the batch size (§4.1).

Srift fits ``t(B) = αB + β`` in pieces: it samples the latency at four batch
sizes ``1, B_max/3, 2·B_max/3, B_max`` and joins them into a 3-segment linear
model, because small batches have a different slope from large ones. Between
samples the model interpolates; outside them it extends the nearest segment —
except past the largest sample when that segment falls: step time cannot drop
as the batch grows, so a falling last segment is measurement noise (seen: a
VGG-19 profile measured 1.53 s at batch 43 and 1.45 s at 64, which extended
to a negative time at batch 1024 and crashed the planner), and the curve is
extended with the secant through the first and last samples instead.
Forward, backward and total (forward + backward measured together) each get
their own curve.

**Monotone fit (default).** Noise on a shared machine can time a larger batch faster
than a smaller one (a ResNet-18 profile on a busy 2-core host), and the piecewise
model then has segments of negative slope inside the measured range too, where a
planner reads that a bigger batch is cheaper. With ``monotone=True`` each curve's
points are first made non-decreasing by isotonic regression (pool adjacent
violators: a run of points that falls is replaced by its mean, weighted by how
many points it pools), so every slope is >= 0; beyond the largest sample a flat
last segment is extended with the secant, as a falling one is. ``monotone=False``
keeps the old fit through the measured medians.

``method="srift"`` uses exactly those four samples (faithful). ``method="dense"``
joins every latency sample in the profile (the profiler's default sampling adds
powers of two), the improvement measured side by side in
``benchmarks/plan/compute_model.py``. ``auto`` picks dense when the profile has more
than Srift's samples.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from rightsize.core.errors import SpecError
from rightsize.profiling.profile import LatencySample, Profile, srift_sample_batches

METHODS = ("auto", "srift", "dense")


@dataclass(frozen=True)
class PiecewiseLinear:
    """A continuous piecewise-linear function through points ``(xs[i], ys[i])``."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    monotone: bool = False

    @classmethod
    def through(
        cls, points: Sequence[tuple[float, float]], monotone: bool = False
    ) -> PiecewiseLinear:
        """Join the points in x order; repeated x values are averaged. ``monotone``: make
        the ys non-decreasing first (module doc)."""
        if not points:
            raise ValueError("a piecewise-linear model needs at least one point")
        merged: dict[float, list[float]] = {}
        for x, y in points:
            merged.setdefault(float(x), []).append(float(y))
        xs = tuple(sorted(merged))
        ys = [sum(merged[x]) / len(merged[x]) for x in xs]
        if monotone:
            ys = non_decreasing(ys, [len(merged[x]) for x in xs])
        return cls(xs, tuple(ys), monotone)

    @property
    def segments(self) -> int:
        return max(0, len(self.xs) - 1)

    def slope_intercept(self, segment: int) -> tuple[float, float]:
        """``(α, β)`` of segment ``i`` (between points i and i+1), as in ``t = αB + β``."""
        x0, x1 = self.xs[segment], self.xs[segment + 1]
        y0, y1 = self.ys[segment], self.ys[segment + 1]
        alpha = (y1 - y0) / (x1 - x0)
        return alpha, y0 - alpha * x0

    def __call__(self, x: float) -> float:
        if len(self.xs) == 1:
            return self.ys[0]
        segment = min(max(bisect.bisect_right(self.xs, x) - 1, 0), self.segments - 1)
        alpha, beta = self.slope_intercept(segment)
        # a falling last segment is noise; a flat one, pooled noise (module doc)
        if x > self.xs[-1] and (alpha < 0 or (self.monotone and alpha == 0)):
            secant = (self.ys[-1] - self.ys[0]) / (self.xs[-1] - self.xs[0])
            return self.ys[-1] + max(secant, 0.0) * (x - self.xs[-1])
        return alpha * x + beta


def non_decreasing(ys: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The weighted least-squares non-decreasing fit to ``ys`` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for y, w in zip(ys, weights, strict=True):
        blocks.append([float(y), float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2, n2), (m1, w1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return [mean for mean, _, count in blocks for _ in range(int(count))]


@dataclass(frozen=True)
class ComputeTime:
    """Predicted compute time of one step at one batch size, in seconds."""

    forward_s: float
    backward_s: float
    total_s: float


@dataclass(frozen=True)
class ComputeModel:
    """Forward, backward and total latency curves, plus the optimizer step time."""

    forward: PiecewiseLinear
    backward: PiecewiseLinear
    total: PiecewiseLinear
    optimizer_s: float
    method: str
    monotone: bool = True

    @classmethod
    def fit(
        cls, samples: Sequence[LatencySample], method: str = "srift", monotone: bool = True
    ) -> ComputeModel:
        """Fit from latency samples. With ``srift``, only the four Srift batches are used;
        ``monotone=False`` is the old fit, whose slopes may be negative (module doc).

        Raises:
            SpecError: unknown method, or the samples lack Srift's batches.
        """
        if method not in METHODS[1:]:
            raise SpecError(f"unknown compute model {method!r}; choose one of {', '.join(METHODS)}")
        chosen = list(samples)
        if method == "srift":
            batch_sizes = [s.batch for s in samples]
            wanted = set(srift_sample_batches(max(batch_sizes), min(batch_sizes)))
            chosen = [s for s in samples if s.batch in wanted]
            if {s.batch for s in chosen} != wanted:
                raise SpecError(f"profile lacks Srift's sample batches {sorted(wanted)}")
        optimizer = sorted(s.optimizer_s for s in chosen)[len(chosen) // 2]
        return cls(
            forward=PiecewiseLinear.through([(s.batch, s.forward_s) for s in chosen], monotone),
            backward=PiecewiseLinear.through([(s.batch, s.backward_s) for s in chosen], monotone),
            total=PiecewiseLinear.through([(s.batch, s.total_s) for s in chosen], monotone),
            optimizer_s=optimizer,
            method=method,
            monotone=monotone,
        )

    @classmethod
    def from_profile(
        cls, profile: Profile, method: str = "auto", monotone: bool = True
    ) -> ComputeModel:
        if method == "auto":
            srift = srift_sample_batches(profile.bmax, profile.min_batch)
            method = "dense" if len(profile.samples) > len(srift) else "srift"
        return cls.fit(profile.samples, method, monotone)

    def predict(self, batch: float) -> ComputeTime:
        """Predicted forward, backward and total time at per-device batch ``batch``."""
        if batch <= 0:
            raise SpecError(f"batch must be positive, got {batch}")
        return ComputeTime(self.forward(batch), self.backward(batch), self.total(batch))
