"""Noisy timings: finding them, measuring them again, and saying what is left.

A profile of MLP-3 was recorded with a coefficient of variation (std/mean) of
1.8 at one batch and fwd+bwd times that fell as the batch grew — segments of
negative slope in Srift's piecewise-linear model (§4.1), which no real device
has. Both come from a shared machine's drift, not from the model. The profiler
re-times the suspect batches (a CV above ``noisy_cv``, or either end of a
falling segment) up to ``retries`` more times, keeping each batch's steadiest
attempt, and records in the profile what is still noisy so that ``predict``
and ``plan`` can say so.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from rightsize.profiling.settings import NOISY_CV, RETIME_RETRIES
from rightsize.profiling.timing import StepRuns, coefficient_of_variation

#: ``time_batches(batches) -> runs``: time these batches once more.
TimeBatches = Callable[[list[int]], dict[int, StepRuns]]


def noisy_batches(runs: dict[int, StepRuns], noisy_cv: float = NOISY_CV) -> list[int]:
    """Batches whose fwd+bwd times spread more than ``noisy_cv``."""
    return sorted(b for b, r in runs.items() if coefficient_of_variation(r.total_s) > noisy_cv)


def falling_segments(medians: Sequence[tuple[int, float]]) -> list[tuple[int, int]]:
    """Consecutive ``(batch, seconds)`` points where the time falls as the batch grows."""
    points = sorted(medians)
    return [(b1, b2) for (b1, t1), (b2, t2) in zip(points, points[1:], strict=False) if t2 < t1]


def median_totals(runs: dict[int, StepRuns]) -> list[tuple[int, float]]:
    return [(b, statistics.median(r.total_s)) for b, r in runs.items()]


def suspects(runs: dict[int, StepRuns], noisy_cv: float = NOISY_CV) -> list[int]:
    """Batches worth timing again: noisy ones and both ends of every falling segment."""
    ends = {b for segment in falling_segments(median_totals(runs)) for b in segment}
    return sorted(set(noisy_batches(runs, noisy_cv)) | ends)


def steady_runs(
    time_batches: TimeBatches,
    runs: dict[int, StepRuns],
    noisy_cv: float = NOISY_CV,
    retries: int = RETIME_RETRIES,
    on_retry: Callable[[int, list[int]], None] = lambda _attempt, _batches: None,
    affords: Callable[[list[int]], bool] = lambda _batches: True,
) -> tuple[dict[int, StepRuns], int]:
    """Re-time suspect batches up to ``retries`` times, keeping each batch's steadiest runs;
    a re-timing ``affords`` refuses (the profile's time budget) is not made.

    Returns:
        The runs kept, and how many re-timings were made.
    """
    runs = dict(runs)
    for attempt in range(retries):
        batches = suspects(runs, noisy_cv)
        if not batches or not affords(batches):
            return runs, attempt
        on_retry(attempt + 1, batches)
        again = time_batches(batches)
        for batch in batches:
            if coefficient_of_variation(again[batch].total_s) < coefficient_of_variation(
                runs[batch].total_s
            ):
                runs[batch] = again[batch]
    return runs, retries
