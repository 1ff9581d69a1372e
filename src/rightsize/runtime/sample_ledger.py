"""The master's side of :class:`rightsize.torch.ElasticSampler`: every sample once per epoch.

DLRover's dynamic sharding (§5.2) hands data out from the master so that a
change of workers never repartitions the dataset; its exactly-once guarantee
needs the shard queues checkpointed with the parameters (§5.3). A user's
torchrun script checkpoints itself, so here the ledger ties the data to the
*script's* checkpoint files instead:

- **Order and steps.** Each epoch of a stream (an ElasticSampler; a process's
  samplers are numbered in creation order, the same on every rank) visits the
  dataset in one fixed order (seeded by ``(seed, epoch)``). A group of ``W``
  ranks takes it in global steps of ``W × B`` samples from where the epoch
  stands, each rank a contiguous part; the applied samples of an epoch are
  therefore always a prefix of its order, and the ledger's state is one number
  per epoch — the prefix length.
- **Every rank the same number of steps** (DDP hangs otherwise): a tail of
  fewer than ``W`` samples after the full steps is shared with the step
  before, so that every step gives every rank at least one sample and at most
  ``B``. Only a group that *starts* with fewer samples left in an epoch than it
  has ranks cannot be served without repeats: it is padded with samples of the
  epoch already applied, as ``DistributedSampler`` pads, and the ledger counts
  them (``padded``) so the report says so.
- **Checkpoints decide.** When a rank is about to ``torch.save`` a file, the
  ledger turns the steps its group has applied (optimizer-stepped) into
  prefixes and keeps them as that file's state (``saving``); once written it
  records the file's size and mtime (``saved``). When a rank of a new group
  ``torch.load``s a file, the group starts from that file's state — the saved
  one if the file is as it was recorded, else the pending one (a rank killed
  between writing and confirming). A group that loads nothing before its first
  step starts every epoch from the beginning: the script started over. A file
  the ledger never saw written (say, from another run) starts the group from
  the beginning too, and the accounting is marked unverified.

The ledger is plain state with no clock or I/O; the master persists
:meth:`to_dict` in its state file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

#: {stream: {epoch: prefix length}}: what a checkpoint (or a group) holds.
Prefixes = dict[int, dict[int, int]]


class LedgerError(ValueError):
    """A sampler asked for something the ledger cannot serve (its description changed)."""


@dataclass(frozen=True)
class StreamSpec:
    """What every rank's sampler of one stream must agree on."""

    dataset_size: int
    batch_size: int
    seed: int
    shuffle: bool


@lru_cache(maxsize=4)
def epoch_order(size: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The order of ``epoch``'s samples (int64), the same in every process."""
    if not shuffle:
        return np.arange(size, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(size).astype(np.int64)


def step_sizes(remaining: int, world: int, batch: int) -> list[int]:
    """Global step sizes that take ``remaining`` samples with ``world`` ranks of at most
    ``batch`` each, every rank at least one sample a step (see the module's doc).

    Returns an empty list for nothing left; fewer samples than ranks give one step of
    ``world`` (the caller pads it).
    """
    if remaining <= 0:
        return []
    full = world * batch
    steps = math.ceil(remaining / full)
    sizes = [full] * (steps - 1) + [remaining - full * (steps - 1)]
    if sizes[-1] < world:
        if steps == 1:
            return [world]
        tail = full + sizes[-1]  # share the short tail with the step before it
        sizes[-2:] = [math.ceil(tail / 2), tail // 2]
    return sizes


def rank_slice(size: int, world: int, rank: int) -> tuple[int, int]:
    """Offsets of ``rank``'s contiguous part of a step of ``size`` (sizes differ by <= 1)."""
    base, extra = divmod(size, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


@dataclass
class _Pass:
    """One group's pass over one epoch of one stream."""

    start: int  # the epoch's prefix when the group began it
    sizes: list[int]
    ends: list[int]  # cumulative positions after each step
    counted: int = 0  # steps counted as handed out (a step is asked for by every rank)

    @classmethod
    def plan(cls, start: int, size: int, world: int, batch: int) -> _Pass:
        sizes = step_sizes(size - start, world, batch)
        ends = list(np.cumsum([start, *sizes])[1:]) if sizes else []
        return cls(start, sizes, [int(e) for e in ends])

    def prefix_after(self, steps: int, size: int) -> int:
        """The epoch's prefix once ``steps`` steps are applied (never past the dataset)."""
        return self.start if steps <= 0 else min(size, self.ends[min(steps, len(self.ends)) - 1])


@dataclass
class _FileRecord:
    pending: Prefixes | None = None
    saved: Prefixes | None = None
    stat: tuple[int, int] | None = None  # (mtime_ns, size) when saved


@dataclass
class SampleLedger:
    """Which samples of each epoch the script's checkpoints hold (see the module's doc)."""

    streams: dict[int, StreamSpec] = field(default_factory=dict)
    files: dict[str, _FileRecord] = field(default_factory=dict)
    generation: int = -1
    world: int = 0
    start: Prefixes | None = None  # the current group's starting point (None: not begun)
    passes: dict[tuple[int, int], _Pass] = field(default_factory=dict)
    applied: Prefixes = field(default_factory=dict)  # the furthest any group reached
    handed_to: Prefixes = field(default_factory=dict)  # the furthest any group was handed
    handed: int = 0  # samples handed out, all groups together
    redone: int = 0  # samples handed out again after a group restarted from a checkpoint
    padded: int = 0  # repeats given to a group with fewer samples left than ranks
    unverified: list[str] = field(default_factory=list)  # files loaded that were never seen saved

    @property
    def latest_epoch(self) -> int | None:
        """The latest epoch any group's sampler asked for (None: no sampler yet)."""
        epochs = [e for _, e in self.passes] + [e for s in self.applied.values() for e in s]
        return max(epochs, default=None)

    # -- groups -----------------------------------------------------------------------
    def new_group(self, generation: int, world: int) -> None:
        """A new group of ``world`` ranks starts: it begins where its first load says."""
        self.generation, self.world = generation, world
        self.start, self.passes = None, {}

    def loaded(self, path: str, stat: tuple[int, int] | None) -> None:
        """A rank of the current group read checkpoint ``path`` (``stat``: its mtime and
        size now). The group starts from the state that file holds, if it has not begun."""
        if self.start is not None:
            return  # a rank loads after the group began (an evaluation's load): not a restart
        record = self.files.get(path)
        if record is None or (record.saved is None and record.pending is None):
            self.unverified.append(path)
            return
        same = record.stat is not None and stat == record.stat
        state = record.saved if same or record.pending is None else record.pending
        self.start = _copy(state)

    def _begin(self) -> Prefixes:
        if self.start is None:
            self.start = {}  # nothing loaded before the first step: the script started over
        return self.start

    # -- steps ------------------------------------------------------------------------
    def step(self, stream: int, spec: StreamSpec, epoch: int, step: int,
             rank: int) -> tuple[np.ndarray, int, bool]:  # fmt: skip
        """``rank``'s indices of ``step`` in ``epoch``; how many steps the group takes in it;
        and whether there is no such step (the epoch is done for this group).

        Raises:
            LedgerError: the stream was described differently before.
        """
        known = self.streams.setdefault(stream, spec)
        if known != spec:
            raise LedgerError(f"ElasticSampler #{stream} changed from {known} to {spec}: every "
                              "rank's sampler must describe the same dataset")  # fmt: skip
        start = self._begin()
        key = (stream, epoch)
        current = self.passes.get(key)
        if current is None:
            begun = start.get(stream, {}).get(epoch, 0)
            current = self.passes[key] = _Pass.plan(begun, spec.dataset_size, self.world,
                                                    spec.batch_size)  # fmt: skip
            remaining = spec.dataset_size - begun
            if 0 < remaining < self.world:
                self.padded += self.world - remaining
        if step >= len(current.sizes):
            return np.zeros(0, dtype=np.int64), len(current.sizes), True
        first = current.start + sum(current.sizes[:step])
        begin, end = rank_slice(current.sizes[step], self.world, rank)
        order = epoch_order(spec.dataset_size, spec.seed, epoch, spec.shuffle)
        positions = np.arange(first + begin, first + end) % spec.dataset_size
        if step == current.counted:
            current.counted += 1
            self._count_handed(stream, epoch, first, current.sizes[step])
        return order[positions], len(current.sizes), False

    def _count_handed(self, stream: int, epoch: int, first: int, size: int) -> None:
        self.handed += size
        furthest = self.handed_to.setdefault(stream, {})
        reached = furthest.get(epoch, 0)
        self.redone += max(0, min(reached, first + size) - first)
        furthest[epoch] = max(reached, first + size)

    # -- what a rank applied ------------------------------------------------------------
    def prefixes(self, applied: dict[int, dict[int, int]]) -> Prefixes:
        """The state after the current group applied ``applied`` steps ({stream: {epoch:
        steps}}): the group's start, moved on by those steps."""
        state = _copy(self._begin())
        for stream, epochs in applied.items():
            spec = self.streams.get(stream)
            for epoch, steps in epochs.items():
                current = self.passes.get((stream, epoch))
                if spec is None or current is None:
                    continue
                state.setdefault(stream, {})[epoch] = current.prefix_after(steps,
                                                                           spec.dataset_size)
        return state

    def reached(self, applied: dict[int, dict[int, int]]) -> None:
        """The current group applied this much (a rank's report at a save or at its end)."""
        for stream, epochs in self.prefixes(applied).items():
            mine = self.applied.setdefault(stream, {})
            for epoch, prefix in epochs.items():
                mine[epoch] = max(mine.get(epoch, 0), prefix)

    # -- checkpoint files ---------------------------------------------------------------
    def saving(self, path: str, applied: dict[int, dict[int, int]]) -> None:
        self.files.setdefault(path, _FileRecord()).pending = self.prefixes(applied)
        self.reached(applied)

    def saved(self, path: str, stat: tuple[int, int] | None) -> None:
        record = self.files.setdefault(path, _FileRecord())
        if record.pending is not None:
            record.saved, record.pending, record.stat = record.pending, None, stat

    # -- what it all adds up to ----------------------------------------------------------
    def summary(self, final: Prefixes) -> dict[str, Any]:
        """The accounting of a finished job whose last group ended at ``final``: per stream
        and epoch, how many of the epoch's samples were applied (each at most once)."""
        epochs = []
        for stream, spec in sorted(self.streams.items()):
            for epoch, prefix in sorted(final.get(stream, {}).items()):
                epochs.append({"stream": stream, "epoch": epoch, "applied": prefix,
                               "dataset_size": spec.dataset_size,
                               "complete": prefix >= spec.dataset_size})  # fmt: skip
        return {
            "epochs": epochs,
            "samples_handed_out": self.handed,
            "samples_handed_again": self.redone,
            "padded": self.padded,
            "unverified_files": sorted(set(self.unverified)),
        }

    # -- persistence ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "streams": {str(k): list(vars(v).values()) for k, v in self.streams.items()},
            "files": {p: {"pending": _jsonable(r.pending), "saved": _jsonable(r.saved),
                          "stat": list(r.stat) if r.stat else None}
                      for p, r in self.files.items()},  # fmt: skip
            "applied": _jsonable(self.applied),
            "handed_to": _jsonable(self.handed_to),
            "counts": [self.handed, self.redone, self.padded],
            "unverified": list(self.unverified),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SampleLedger:
        ledger = cls()
        if not data:
            return ledger
        ledger.streams = {int(k): StreamSpec(*v) for k, v in data["streams"].items()}
        ledger.files = {
            p: _FileRecord(_from_json(r["pending"]), _from_json(r["saved"]),
                           tuple(r["stat"]) if r["stat"] else None)
            for p, r in data["files"].items()
        }  # fmt: skip
        ledger.applied = _from_json(data["applied"]) or {}
        ledger.handed_to = _from_json(data["handed_to"]) or {}
        ledger.handed, ledger.redone, ledger.padded = data["counts"]
        ledger.unverified = list(data["unverified"])
        return ledger


def _copy(state: Prefixes | None) -> Prefixes:
    return {s: dict(e) for s, e in (state or {}).items()}


def _jsonable(state: Prefixes | None) -> dict | None:
    if state is None:
        return None
    return {str(s): {str(e): p for e, p in epochs.items()} for s, epochs in state.items()}


def _from_json(data: dict | None) -> Prefixes | None:
    if data is None:
        return None
    return {int(s): {int(e): int(p) for e, p in epochs.items()} for s, epochs in data.items()}
