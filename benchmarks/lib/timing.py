"""Timing calls: each variant timed round-robin in a shuffled order, medians per call."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from benchmarks.lib.repeats import shuffled_rounds


def interleaved_medians(
    variants: dict[str, Callable[[], None]], rounds: int, inner: int = 1, warmup: int = 2
) -> dict[str, dict]:
    """Median (and all) seconds per call of each variant, timed round-robin in shuffled order
    after ``warmup`` untimed calls each; a round times ``inner`` calls of a variant at once."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _, order in shuffled_rounds(list(variants), rounds, seed=0):
        for name in order:
            start = time.perf_counter()
            for _ in range(inner):
                variants[name]()
            times[name].append((time.perf_counter() - start) / inner)
    return {name: {"median_s": statistics.median(t), "runs_s": t} for name, t in times.items()}
