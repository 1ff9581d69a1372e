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

from rightsize.scaling.api import MetricSample, window_speed
from rightsize.scaling.nearchus_params import NearchusParams


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
            columns = sample.nodes
            # a plain zip: a set of columns holds one value per node, and ``strict=`` costs
            # a third of this loop on Python 3.11 (the simulator's hottest policy loop)
            for name, node_used, node_allocated in zip(  # noqa: B905
                columns.names, columns.cpu_used_cores, columns.cpu_allocated_cores
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
    """The window's samples in consecutive groups of about ``period_s`` seconds each,
    ending at the newest sample, oldest first (a leftover of older samples is dropped).

    Groups are counted in samples — ``period_s`` over the window's mean spacing — not cut
    on the clock: a mechanism samples every interval give or take its timer's jitter, and
    a sample that comes late (the master was busy with a checkpoint) is still the next
    sample. Cutting on the clock put two samples in one group and left the next group
    empty, which ended the run of consecutive points (issue 17: the runtime's 2 s samples
    seldom made 5 points). With one sample per period (the usual case, and the
    simulator's) every sample is a point. Points are consecutive: only samples after the
    last pause of a whole period without one count.
    """
    window = window[_after_last_gap(window, period_s) :]
    per_point = samples_per_point(window, period_s)
    if per_point == 1:
        return [(sample,) for sample in window]
    count = len(window) // per_point
    first = len(window) - count * per_point
    return [tuple(window[first + i * per_point : first + (i + 1) * per_point])
            for i in range(count)]  # fmt: skip


#: A pause between two samples longer than this many periods (a period with no sample at
#: all; a sample merely late comes 1.5 periods after the one before) breaks the points' run.
MAX_GAP_PERIODS = 1.75


def _after_last_gap(window: Sequence[MetricSample], period_s: float) -> int:
    """Index of the first sample after the window's last gap of :data:`MAX_GAP_PERIODS`."""
    for i in range(len(window) - 1, 0, -1):
        if window[i].time_s - window[i - 1].time_s > MAX_GAP_PERIODS * period_s:
            return i
    return 0


def samples_per_point(window: Sequence[MetricSample], period_s: float) -> int:
    """How many of the window's samples make one period (at least 1)."""
    if len(window) < 2:
        return 1
    spacing = (window[-1].time_s - window[0].time_s) / (len(window) - 1)
    return max(1, round(period_s / spacing)) if spacing > 0 else 1


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
    return sum(u for s in point for u in s.nodes.cpu_used_cores) / len(point)


def stable_window(window: Sequence[MetricSample], params: NearchusParams) -> StableWindow | None:
    """NEARCHUS's Stability Detector: the last ``N_comp`` points if CPU use and speed each
    have a CV below ``cv_max``, else ``None``. A point without training steps is never
    stable: a job that trains nothing is starting or stalled, and its constant zero speed
    has no variation to measure (issue 17: a job still launching was "stable" and its
    loading PS was stripped of CPU)."""
    points = stability_points(window, params.stability_period_s)[-params.n_comp :]
    if len(points) < params.n_comp:
        return None
    used = [_mean_cpu_used(p) for p in points]
    if _cv(used) >= params.cv_max:
        return None
    speed = [window_speed(p) for p in points]  # each point's mean steps/s
    if min(speed) <= 0 or _cv(speed) >= params.cv_max:
        return None
    return StableWindow.of(tuple(chain.from_iterable(points)))


def stable_from_s(window: Sequence[MetricSample], params: NearchusParams, now_s: float) -> float:
    """The earliest time the window can hold ``N_comp`` stability points."""
    start = window[0].time_s if window else now_s
    return start + (params.n_comp - 1) * params.stability_period_s
