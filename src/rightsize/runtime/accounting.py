"""Checking the central invariant: every sample index trained exactly once per epoch.

The records are what the parameter holders actually applied: each parameter
server (per group of tensors sharing an update history) and each allreduce
checkpoint keeps a log of ``(key, sample indices)`` for every gradient it
applied. This module reads such a log and counts, per epoch, how often each
index appears. It trusts nothing else: not the shard queues, not the workers'
reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class EpochCount:
    """One epoch's tally: indices seen twice or more, and indices never seen."""

    epoch: int
    applied: int
    duplicated: int
    missing: int


@dataclass
class Accounting:
    """The tally over all epochs of one log."""

    dataset_size: int
    epochs: list[EpochCount] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return sum(e.duplicated for e in self.epochs)

    def exactly_once(self, complete_epochs: int) -> bool:
        """No index twice in any epoch, and none missing from the first ``complete_epochs``."""
        complete = [e for e in self.epochs if e.epoch < complete_epochs]
        return (
            self.duplicates == 0
            and len(complete) == complete_epochs
            and all(e.missing == 0 for e in complete)
        )

    def to_dict(self) -> dict:
        return {
            "dataset_size": self.dataset_size,
            "epochs": [e.__dict__ for e in self.epochs],
        }


def count_log(
    entries: Iterable[tuple[tuple[int, int, int], np.ndarray]], dataset_size: int
) -> Accounting:
    """Tally ``(key, indices)`` entries; ``key[0]`` is the epoch."""
    counts: dict[int, np.ndarray] = {}
    for key, indices in entries:
        epoch = int(key[0])
        if epoch not in counts:
            counts[epoch] = np.zeros(dataset_size, dtype=np.int64)
        np.add.at(counts[epoch], np.asarray(indices, dtype=np.int64), 1)
    result = Accounting(dataset_size)
    for epoch in sorted(counts):
        c = counts[epoch]
        result.epochs.append(
            EpochCount(epoch, int(c.sum()), int((c > 1).sum()), int((c == 0).sum()))
        )
    return result
