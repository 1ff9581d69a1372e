"""Repeats in a seeded shuffle, and the medians taken over them.

A shared host's speed drifts by tens of percent over minutes; running every variant once
per round, in a fresh shuffled order, lands the drift on every variant alike, and the
median over the rounds removes it.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Samples of a run's first metric intervals left out of medians (start-up, warm caches).
WARMUP_INTERVALS = 2


def shuffled(items: Iterable[T], seed: int) -> list[T]:
    """``items`` in one seeded shuffled order (the same seed, the same order)."""
    order = list(items)
    random.Random(seed).shuffle(order)
    return order


def shuffled_rounds(items: Sequence[T], repeats: int, seed: int) -> Iterator[tuple[int, list[T]]]:
    """``(repeat, order)`` for each repeat: the items reshuffled each round by one seeded
    generator."""
    rng = random.Random(seed)
    order = list(items)
    for repeat in range(repeats):
        rng.shuffle(order)
        yield repeat, list(order)


def steady(values: list[float]) -> list[float]:
    """The values after the warm-up intervals (all of them if the run was too short)."""
    return values[WARMUP_INTERVALS:] or values


def median_or_none(values: Iterable[float | None]) -> float | None:
    """The median of the values present (None when there are none)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
