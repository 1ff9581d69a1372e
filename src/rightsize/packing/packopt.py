"""pack_opt: which trials to train together (packing paper §5.2-§5.4).

A packable partitioning groups the sampled trials so that every group fits
one device (§5.2); the singleton partitioning always does. Four strategies:

- ``knn`` — §5.3's nearest-neighbour heuristic: pick a random remaining trial
  as the centroid, add the other remaining trials in order of their distance
  to it until one is farther than the user's ``threshold`` or the device runs
  out of memory, and repeat until every trial is in a group. Distance is the
  paper's worked example: per hyper-parameter 0/1 for categorical values and
  the difference of list positions for numeric ones, summed (batch 20 vs 40 in
  steps of 5 is 4, SGD vs Adagrad 1: distance 5). The text calls it Euclidean
  but its example adds the parts, so ``l1`` is the default and ``euclidean``
  the selectable alternative.
- ``random`` — Random Pack (§5.4): shuffle, then fill groups of up to
  ``max_pack_size`` trials (default: as many as fit) in that order.
- ``batch-size`` — Batch-size Pack (§5.4): only trials of one batch size share
  a group, filled greedily until the device is full.
- ``none`` — every trial alone (the original Hyperband).

Every strategy is pure: trials, a ``fits`` predicate (memory) and a seeded
random generator in, a list of groups out. A group's trial order is the order
it was filled in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rightsize.core.errors import SpecError, choose
from rightsize.packing.choices import Distance, PackStrategy
from rightsize.packing.space import SearchSpace
from rightsize.packing.trial import TrialSpec

Fits = Callable[[Sequence[TrialSpec]], bool]


@dataclass(frozen=True)
class PackOptSettings:
    """How pack_opt groups trials.

    Attributes:
        strategy: one of :data:`~rightsize.packing.choices.PACK_STRATEGIES`.
        threshold: kNN's similarity threshold: the largest distance from the
            centroid a trial may have to join its group (the paper leaves the
            value to the user; default no limit, so memory alone bounds a group).
        max_pack_size: at most this many trials per group (Random Pack's ``m``;
            default none: memory alone bounds a group).
        distance: ``l1`` (the paper's worked example) or ``euclidean``.
    """

    strategy: PackStrategy = PackStrategy.KNN
    threshold: float = math.inf
    max_pack_size: int | None = None
    distance: Distance = Distance.L1

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", choose(PackStrategy, self.strategy, "pack strategy"))
        object.__setattr__(self, "distance", choose(Distance, self.distance, "distance"))
        if self.threshold < 0:
            raise SpecError(f"pack threshold must be >= 0, got {self.threshold}")
        if self.max_pack_size is not None and self.max_pack_size < 1:
            raise SpecError(f"max pack size must be >= 1, got {self.max_pack_size}")


def distance(space: SearchSpace, a: TrialSpec, b: TrialSpec, metric: str = "l1") -> float:
    """§5.3's distance between two trials' configurations."""
    parts = []
    for name, i, j in zip(
        space.names, space.indices(a.config), space.indices(b.config), strict=True
    ):
        parts.append(abs(i - j) if name in space.numeric else float(i != j))
    return math.sqrt(sum(p * p for p in parts)) if metric == Distance.EUCLIDEAN else float(sum(parts))


def pack_opt(
    trials: Sequence[TrialSpec],
    settings: PackOptSettings,
    fits: Fits,
    rng: np.random.Generator,
    space: SearchSpace | None = None,
) -> list[list[TrialSpec]]:
    """Partition ``trials`` into packable groups with the chosen strategy.

    Args:
        trials: the trials of one rung.
        settings: strategy and its parameters.
        fits: whether a group fits the device's memory.
        rng: the only source of randomness (centroids, shuffles).
        space: the search space (needed by ``knn`` for distances).
    """
    limit = settings.max_pack_size or len(trials)

    def admits(group: list[TrialSpec], trial: TrialSpec) -> bool:
        return len(group) < limit and fits([*group, trial])

    if settings.strategy is PackStrategy.NONE:
        return [[t] for t in trials]
    if settings.strategy is PackStrategy.RANDOM:
        order = [trials[i] for i in rng.permutation(len(trials))]
        return _fill_in_order(order, admits)
    if settings.strategy is PackStrategy.BATCH_SIZE:
        by_batch: dict[int, list[TrialSpec]] = {}
        for trial in trials:
            by_batch.setdefault(trial.batch_size, []).append(trial)
        return [g for same in by_batch.values() for g in _fill_in_order(same, admits)]
    if space is None:
        raise ValueError("knn packing needs the search space for distances")
    return _knn(list(trials), settings, admits, rng, space)


def _fill_in_order(order: list[TrialSpec], admits) -> list[list[TrialSpec]]:
    """Greedy: add trials in order to the open group; start a new one when it is full."""
    groups: list[list[TrialSpec]] = []
    for trial in order:
        if groups and admits(groups[-1], trial):
            groups[-1].append(trial)
        else:
            groups.append([trial])
    return groups


def _knn(remaining: list[TrialSpec], settings, admits, rng, space) -> list[list[TrialSpec]]:
    groups = []
    while remaining:
        centroid = remaining.pop(int(rng.integers(len(remaining))))
        ranked = sorted(
            enumerate(remaining),
            key=lambda item: (distance(space, centroid, item[1], settings.distance), item[0]),
        )
        group = [centroid]
        for _, trial in ranked:
            near = distance(space, centroid, trial, settings.distance) <= settings.threshold
            if not near or not admits(group, trial):
                break  # "packs all other configurations similar to it until the device runs out"
            group.append(trial)
        chosen = {id(t) for t in group}
        remaining = [t for t in remaining if id(t) not in chosen]
        groups.append(group)
    return groups


#: ``balance``'s price of one more pack, in trials: a pack's training step costs
#: about 0.6 ms per MLP-3 trial plus ~1.3 ms per pack on this CPU (one thread,
#: ragged; benchmarks/packing_step.py), so halving a pack adds about two trials' work.
BALANCE_PACK_OVERHEAD_TRIALS = 2.0
#: A trial-step's work grows with its rows, plus an optimizer update that costs
#: about as much as this many more rows (MLP-3, one thread: a fused Adam update
#: 0.198 ms against 7.2 µs per row of products; benchmarks/packing_roofline.py).
UPDATE_ROWS = 27.0

Work = Callable[[TrialSpec], float]


def row_work(trials: Sequence[TrialSpec]) -> Work:
    """Each trial's work in average trials: its rows plus :data:`UPDATE_ROWS`, over their mean."""
    mean = sum(t.batch_size + UPDATE_ROWS for t in trials) / max(1, len(trials))
    return lambda trial: (trial.batch_size + UPDATE_ROWS) / mean


def balance(
    groups: list[list[TrialSpec]],
    workers: int,
    fits: Fits,
    overhead_trials: float = BALANCE_PACK_OVERHEAD_TRIALS,
    work: Work = lambda _trial: 1.0,
) -> list[list[TrialSpec]]:
    """Reshape pack_opt's groups while that shortens the busiest worker's work.

    With several workers training packs side by side, one pack holding most of
    a phase's trials would leave the others idle, but a smaller pack costs more
    per trial. A group costs its trials' ``work`` (default: one each;
    :func:`row_work` weighs them by batch) plus ``overhead_trials``; groups go
    to workers heaviest first, each to the least loaded (what the worker pool
    does with its largest-first queue). Two moves are tried, and the better one
    kept while it lowers the busiest worker's cost: move the heaviest group's
    last trial (kNN: the farthest from its centroid) to the lightest group, if
    it fits there; or halve the heaviest group (its halves keep pack_opt's
    order, and fit).
    """

    def weight(group: list[TrialSpec]) -> float:
        return sum(work(t) for t in group)

    def makespan(candidate: list[list[TrialSpec]]) -> float:
        loads = [0.0] * workers
        for group in sorted(candidate, key=weight, reverse=True):
            loads[loads.index(min(loads))] += weight(group) + overhead_trials
        return max(loads)

    groups = sorted(groups, key=weight, reverse=True)
    cost = makespan(groups)
    while groups and len(groups[0]) > 1:
        moves = [_halve(groups)]
        if len(groups) > 1 and fits([*groups[-1], groups[0][-1]]):
            moves.append([groups[0][:-1], *groups[1:-1], [*groups[-1], groups[0][-1]]])
        best_cost, best = min(((makespan(m), m) for m in moves), key=lambda scored: scored[0])
        if best_cost >= cost:
            break
        groups, cost = sorted(best, key=weight, reverse=True), best_cost
    return groups


def _halve(groups: list[list[TrialSpec]]) -> list[list[TrialSpec]]:
    half = (len(groups[0]) + 1) // 2
    return [groups[0][:half], groups[0][half:], *groups[1:]]
