"""Dynamic data sharding (DLRover §5.2) with straggler mitigation (§5.4).

The dataset's sample indices are split, per epoch, into many small shards (a
shard is a list of indices, never the samples). Work is handed out as *tasks*,
a shard's batch range ``[begin, end)``: all tasks start in the TODO queue; a
worker leases one, which moves it to DOING under the worker's name; the worker
reports progress after every batch whose gradients every parameter server has
applied, and finishes the task; a task held by a worker that dies or is removed
goes back to TODO from its last reported batch. The epoch advances when both
queues drain. A straggler is leased only part of a shard at a time (§5.4), so
the epoch's tail does not wait on it.

Every batch has a stable key ``(epoch, shard, batch)`` and a fixed set of sample
indices, whoever trains it. That is what makes exactly-once training possible
under faults: parameter servers apply each key at most once, progress is only
reported once a key is applied everywhere, and :meth:`ShardManager.snapshot`
(taken before the parameters are checkpointed) never claims more progress than
the parameters hold, so a restore replays, and deduplicates, rather than skips.

The manager is plain state with no clock or I/O; the master persists its
snapshots with each checkpoint.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

Key = tuple[int, int, int]  # (epoch, shard, batch)

#: Default shard size in batches when the job file gives none. DLRover asks for
#: "many much smaller shards" than one per worker; 8 batches keeps a re-leased
#: remainder short while a lease round trip stays rare next to a step.
DEFAULT_SHARD_BATCHES = 8


@dataclass(frozen=True)
class ShardPlan:
    """How a dataset is cut into shards and batches, and how long the job trains.

    Attributes:
        dataset_size: samples per epoch.
        shard_size: samples per shard (the last shard may be shorter).
        batch_size: samples per batch (a shard's last batch may be shorter).
        epochs: passes over the data, or ``None`` to train until ``steps``.
        steps: stop after this many batches in all, or ``None`` for whole epochs.
        seed: seed of the per-epoch shuffle.
        shuffle: visit samples in a new random order every epoch.
    """

    dataset_size: int
    shard_size: int
    batch_size: int
    epochs: int | None = 1
    steps: int | None = None
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        if min(self.dataset_size, self.shard_size, self.batch_size) < 1:
            raise ValueError(f"dataset, shard and batch sizes must be >= 1: {self}")
        if self.epochs is None and self.steps is None:
            raise ValueError("a shard plan needs epochs or steps")

    @property
    def num_shards(self) -> int:
        return math.ceil(self.dataset_size / self.shard_size)

    def shard_length(self, shard: int) -> int:
        return min(self.shard_size, self.dataset_size - shard * self.shard_size)

    def batches_in(self, shard: int) -> int:
        return math.ceil(self.shard_length(shard) / self.batch_size)

    @property
    def steps_per_epoch(self) -> int:
        return sum(self.batches_in(s) for s in range(self.num_shards))

    @property
    def steps_total(self) -> int:
        if self.steps is not None:
            return self.steps
        return self.steps_per_epoch * (self.epochs or 1)

    def indices(self, epoch: int, shard: int) -> np.ndarray:
        """The sample indices of ``shard`` in ``epoch`` (int64)."""
        start = shard * self.shard_size
        return _order(self.dataset_size, self.seed, epoch, self.shuffle)[
            start : start + self.shard_length(shard)
        ]

    def batch_indices(self, key: Key) -> np.ndarray:
        epoch, shard, batch = key
        return self.indices(epoch, shard)[batch * self.batch_size : (batch + 1) * self.batch_size]

    def batch_length(self, shard: int, batch: int) -> int:
        return min(self.batch_size, self.shard_length(shard) - batch * self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@lru_cache(maxsize=2)
def _order(size: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(size, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(size).astype(np.int64)


@dataclass(frozen=True)
class Task:
    """Batches ``[begin, end)`` of ``shard`` in ``epoch``: the unit a worker leases."""

    epoch: int
    shard: int
    begin: int
    end: int

    def to_list(self) -> list[int]:
        return [self.epoch, self.shard, self.begin, self.end]

    @classmethod
    def from_list(cls, data: Sequence[int]) -> Task:
        return cls(*(int(x) for x in data))


@dataclass
class Lease:
    """A task in DOING: who holds it and how far it is (batches before ``next_batch`` are done)."""

    task: Task
    worker: str
    next_batch: int

    @property
    def remainder(self) -> Task | None:
        t = self.task
        return Task(t.epoch, t.shard, self.next_batch, t.end) if self.next_batch < t.end else None


@dataclass(frozen=True)
class StragglerRule:
    """DLRover §5.4: "If a worker is straggler, Data Shard Manager would dispatch fewer
    data shards to this worker." The paper names no threshold; these are ours.

    Attributes:
        speed_ratio: a worker whose speed is below this fraction of its peers'
            median speed is a straggler.
        shard_fraction: the part of a shard a straggler is leased at a time.
    """

    speed_ratio: float = 0.5
    shard_fraction: float = 0.5

    def fraction(self, speed: float | None, peer_speeds: Sequence[float]) -> float:
        """1.0 for a normal worker, ``shard_fraction`` for a straggler (needs 2+ known speeds)."""
        if speed is None or len(peer_speeds) < 2:
            return 1.0
        median = statistics.median(peer_speeds)
        return self.shard_fraction if median > 0 and speed < self.speed_ratio * median else 1.0


class ShardManager:
    """TODO and DOING queues over a :class:`ShardPlan` (DLRover's Data Shard Manager)."""

    def __init__(self, plan: ShardPlan, state: dict[str, Any] | None = None) -> None:
        self.plan = plan
        self.doing: dict[str, Lease] = {}
        if state is None:
            self.epoch, self.batches_done, self.samples_done = 0, 0, 0
            self.todo: deque[Task] = deque(self._epoch_tasks(0))
        else:
            self.epoch = int(state["epoch"])
            self.batches_done = int(state["batches_done"])
            self.samples_done = int(state["samples_done"])
            self.todo = deque(Task.from_list(t) for t in state["todo"])

    # -- queries ------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        if self.plan.steps is not None and self.batches_done >= self.plan.steps:
            return True
        last = self.plan.epochs is not None and self.epoch >= self.plan.epochs - 1
        return last and not self.todo and not self.doing

    def lease_of(self, worker: str) -> Lease | None:
        return self.doing.get(worker)

    # -- the worker protocol ------------------------------------------------------
    def lease(self, worker: str, fraction: float = 1.0) -> Lease | None:
        """The worker's current lease, else a new one from TODO, else ``None`` (wait or done).

        Idempotent: asking again while holding a lease returns the same lease, so
        a request retried after a lost reply never leases two tasks.
        """
        if worker in self.doing:
            return self.doing[worker]
        if self.finished:
            return None
        if not self.todo and not self.doing:
            self._advance_epoch()
        task = self._take(fraction)
        if task is None:
            return None
        lease = Lease(task, worker, task.begin)
        self.doing[worker] = lease
        return lease

    def progress(self, worker: str, task: Task, next_batch: int) -> bool:
        """Record that batches before ``next_batch`` of ``task`` are applied everywhere.

        Returns:
            False if the worker does not hold ``task`` (a stale report), else True.
        """
        lease = self.doing.get(worker)
        if lease is None or lease.task != task or not task.begin <= next_batch <= task.end:
            return False
        for batch in range(lease.next_batch, next_batch):
            self.batches_done += 1
            self.samples_done += self.plan.batch_length(task.shard, batch)
        lease.next_batch = max(lease.next_batch, next_batch)
        return True

    def finish(self, worker: str, task: Task) -> bool:
        """The worker trained all of ``task``; it leaves DOING. False for a stale report."""
        if not self.progress(worker, task, task.end):
            return False
        del self.doing[worker]
        return True

    def release(self, worker: str) -> Task | None:
        """The worker died or was removed: what it had not finished goes back to TODO (front)."""
        lease = self.doing.pop(worker, None)
        remainder = lease.remainder if lease else None
        if remainder is not None:
            self.todo.appendleft(remainder)
        return remainder

    # -- checkpoints --------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The queues as a restore should see them: every lease folded back into TODO."""
        held = [lease.remainder for lease in self.doing.values()]
        todo = [t for t in held if t is not None] + list(self.todo)
        return {
            "epoch": self.epoch,
            "batches_done": self.batches_done,
            "samples_done": self.samples_done,
            "todo": [t.to_list() for t in todo],
        }

    # -- internals ----------------------------------------------------------------
    def _epoch_tasks(self, epoch: int) -> list[Task]:
        return [Task(epoch, s, 0, self.plan.batches_in(s)) for s in range(self.plan.num_shards)]

    def _advance_epoch(self) -> None:
        self.epoch += 1
        self.todo.extend(self._epoch_tasks(self.epoch))

    def _take(self, fraction: float) -> Task | None:
        if not self.todo:
            return None
        task = self.todo.popleft()
        size = task.end - task.begin
        allowed = self._steps_left()
        take = min(size, max(1, math.ceil(size * fraction)), allowed)
        if take <= 0:
            self.todo.appendleft(task)
            return None
        if take < size:
            self.todo.appendleft(Task(task.epoch, task.shard, task.begin + take, task.end))
        return Task(task.epoch, task.shard, task.begin, task.begin + take)

    def _steps_left(self) -> int:
        if self.plan.steps is None:
            return 1 << 62
        outstanding = sum(lease.task.end - lease.next_batch for lease in self.doing.values())
        return self.plan.steps - self.batches_done - outstanding
