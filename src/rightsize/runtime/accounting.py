"""Checking the central invariant: every sample index trained exactly once per epoch.

The records are what the parameter holders actually applied: each parameter
server (per group of tensors sharing an update history) and each allreduce
checkpoint keeps a log of ``(key, sample indices)`` for every gradient it
applied. This module reads such a log and counts, per epoch, how often each
index appears. It trusts nothing else: not the shard queues, not the workers'
reports. Every epoch the job should have completed gets a row, so an epoch
with no applied update at all shows as entirely missing rather than not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class EpochCount:
    """One epoch's tally: updates applied, samples applied, indices seen twice or more
    (counting every extra application), and indices never seen."""

    epoch: int
    steps: int
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

    @property
    def steps(self) -> int:
        return sum(e.steps for e in self.epochs)

    @property
    def samples(self) -> int:
        return sum(e.applied for e in self.epochs)

    def complete_epochs(self) -> int:
        """Leading epochs in which every index was applied exactly once."""
        done = 0
        for e in self.epochs:
            if e.epoch != done or e.missing or e.duplicated:
                break
            done += 1
        return done

    def exactly_once(self, complete_epochs: int) -> bool:
        """No index twice in any epoch, and none missing from the first ``complete_epochs``."""
        return self.duplicates == 0 and self.complete_epochs() >= complete_epochs

    def problems(self, complete_epochs: int) -> list[EpochCount]:
        """Epochs breaking the invariant: a duplicate anywhere, a gap in a complete epoch."""
        return [e for e in self.epochs
                if e.duplicated or (e.epoch < complete_epochs and e.missing)]  # fmt: skip

    def to_dict(self) -> dict:
        return {"dataset_size": self.dataset_size, "epochs": [asdict(e) for e in self.epochs]}


def count_log(
    entries: Iterable[tuple[tuple[int, int, int], np.ndarray]],
    dataset_size: int,
    expected_epochs: int = 0,
) -> Accounting:
    """Tally ``(key, indices)`` entries (``key[0]`` is the epoch); epochs below
    ``expected_epochs`` get a row even when nothing of them was applied."""
    counts: dict[int, np.ndarray] = {e: np.zeros(dataset_size, np.int64)
                                     for e in range(expected_epochs)}  # fmt: skip
    steps: dict[int, int] = dict.fromkeys(counts, 0)
    for key, indices in entries:
        epoch = int(key[0])
        if epoch not in counts:
            counts[epoch], steps[epoch] = np.zeros(dataset_size, dtype=np.int64), 0
        np.add.at(counts[epoch], np.asarray(indices, dtype=np.int64), 1)
        steps[epoch] += 1
    result = Accounting(dataset_size)
    for epoch in sorted(counts):
        c = counts[epoch]
        extra = int(np.clip(c - 1, 0, None).sum())
        result.epochs.append(
            EpochCount(epoch, steps[epoch], int(c.sum()), extra, int((c == 0).sum()))
        )
    return result
