"""NEARCHUS's Stability Detector (Tariq et al., §IV): decide nothing until the metrics settle.

"Stability Detector applies a strict coefficient-of-variance (CV < 5%) for
N_comp = 5 consecutive samples to decide whether a training job is
stabilized (5 to 8 minutes) based on two major metrics: compute resource
utilization and training speed." A stability sample here is the mean over
``stability_period_s`` of the mechanism's metric samples (see
:class:`~rightsize.scaling.nearchus.NearchusParams`), so the rule does not
depend on how often the mechanism measures. :class:`StableWindow` is what the
Scaling Engine and Resource Optimizer read from the accepted samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

from rightsize.scaling.api import MetricSample, window_speed

if TYPE_CHECKING:  # the parameters live with the policy, which imports this module
    from rightsize.scaling.nearchus import NearchusParams


@dataclass(frozen=True)
class StableWindow:
    """The samples the stability detector accepted, summarized for the engine.

    Attributes:
        samples: the accepted samples (the last ``N_comp`` stability points).
        e_job: ``Σu_i / Σa_i`` over them.
        speed: mean job steps per second over them.
        used: mean CPU cores each node used over them.
    """

    samples: tuple[MetricSample, ...]
    e_job: float
    speed: float
    used: dict[str, float]

    @classmethod
    def of(cls, samples: tuple[MetricSample, ...]) -> StableWindow:
        used: dict[str, float] = {}
        total_used = allocated = 0.0
        for sample in samples:
            columns = sample.columns
            for name, node_used, node_allocated in zip(
                columns.names, columns.cpu_used_cores, columns.cpu_allocated_cores, strict=True
            ):
                used[name] = used.get(name, 0.0) + node_used
                total_used += node_used
                allocated += node_allocated
        count = len(samples)
        return cls(
            samples,
            total_used / allocated if allocated else 0.0,
            window_speed(samples),
            {name: value / count for name, value in used.items()},
        )

    def node_used(self) -> dict[str, float]:
        """Mean CPU cores each node used over the stable samples."""
        return dict(self.used)


def stability_points(
    window: Sequence[MetricSample], period_s: float
) -> list[tuple[MetricSample, ...]]:
    """Consecutive groups of ``period_s`` seconds ending at the newest sample, oldest first.

    Group ``k`` holds the samples taken in ``(end - (k+1)·period, end - k·period]``;
    only groups back to the first empty one count, so the points are consecutive.
    """
    if not window:
        return []
    end = window[-1].time_s
    keys = [int((end - sample.time_s) // period_s) for sample in window]
    if keys == list(range(len(window) - 1, -1, -1)):  # one sample per period: the usual case
        return [(sample,) for sample in window]
    groups: dict[int, list[MetricSample]] = {}
    for sample, key in zip(window, keys, strict=True):
        groups.setdefault(key, []).append(sample)
    count = 0
    while count in groups:
        count += 1
    return [tuple(groups[k]) for k in reversed(range(count))]


def _cv(values: list[float]) -> float:
    """Population coefficient of variation (as ``api.coefficient_of_variation``, in floats)."""
    mean = sum(values) / len(values)
    if not mean:
        return 0.0
    return math.sqrt(sum([(v - mean) ** 2 for v in values]) / len(values)) / abs(mean)


def _mean_cpu_used(point: tuple[MetricSample, ...]) -> float:
    """A stability point's CPU use: one running sum over every node of its samples, over their
    count. A one-sample point (the usual case) is its sample's remembered ``cpu_used_cores``,
    the same running sum divided by one: the same float, summed once per sample."""
    if len(point) == 1:
        return point[0].cpu_used_cores
    return sum(u for s in point for u in s.columns.cpu_used_cores) / len(point)


def stable_window(window: Sequence[MetricSample], params: NearchusParams) -> StableWindow | None:
    """NEARCHUS's Stability Detector: the last ``N_comp`` points if CPU use and speed each
    have a CV below ``cv_max``, else ``None``."""
    points = stability_points(window, params.stability_period_s)[-params.n_comp :]
    if len(points) < params.n_comp:
        return None
    used = [_mean_cpu_used(p) for p in points]
    if _cv(used) >= params.cv_max:
        return None
    speed = [window_speed(p) for p in points]  # each point's mean steps/s
    if _cv(speed) >= params.cv_max:
        return None
    return StableWindow.of(tuple(chain.from_iterable(points)))


def stable_from_s(window: Sequence[MetricSample], params: NearchusParams, now_s: float) -> float:
    """The earliest time the window can hold ``N_comp`` stability points."""
    start = window[0].time_s if window else now_s
    return start + (params.n_comp - 1) * params.stability_period_s
