"""What a user's training script may import from rightsize: one line instead of DistributedSampler.

``ElasticSampler`` takes ``DistributedSampler``'s arguments and is used the same way
(``DataLoader(dataset, batch_size=B, sampler=ElasticSampler(dataset))``, then
``sampler.set_epoch(epoch)`` every epoch). Under ``rightsize torchrun`` it draws each
step's indices from the master (DLRover §5.2's dynamic sharding; ``runtime/
sample_ledger.py``), so that across resizes, killed ranks and restarts every sample is
trained exactly once per epoch, counted from the script's own checkpoints; every rank
takes the same number of steps, each with at most ``batch_size`` samples. Under plain
``torchrun`` (or none) it is a ``DistributedSampler`` with the same arguments, so the
script runs anywhere.

Under rightsize the DataLoader's ``drop_last`` is not applied: the last step of an epoch
may be smaller, and every sample is used.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sized

from torch.utils.data import Sampler
from torch.utils.data.distributed import DistributedSampler

from rightsize.runtime import script_link

__all__ = ["ElasticSampler", "ElasticBatchSampler"]


class ElasticSampler(Sampler[int]):
    """A drop-in for ``torch.utils.data.distributed.DistributedSampler`` (same arguments).

    Args:
        dataset: the dataset (only its length is used).
        num_replicas, rank: as DistributedSampler's; used only outside rightsize (inside,
            the group's size and this rank come from the launcher, and change on resizes).
        shuffle: visit the samples in a new order every epoch (seeded by ``seed + epoch``).
        seed: the shuffle's seed, the same on every rank.
        drop_last: as DistributedSampler's outside rightsize; ignored inside (see above).
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:  # fmt: skip
        self.dataset_size = len(dataset)
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        #: the batch size of the DataLoader it feeds (the launcher sets it); steps hand out
        #: at most this many samples to each rank
        self.batch_size = 1
        self._source = script_link.current()
        self._stream = self._source.new_stream() if self._source is not None else None
        self._fallback = (
            DistributedSampler(dataset, num_replicas, rank, shuffle, seed, drop_last)
            if self._source is None else None
        )  # fmt: skip

    @property
    def elastic(self) -> bool:
        """True under rightsize torchrun: indices come from the master."""
        return self._source is not None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self._fallback is not None:
            self._fallback.set_epoch(epoch)

    def step(self, step: int):
        """This rank's indices of ``step`` of the current epoch, the group's steps in it, and
        whether there is no such step."""
        return self._source.samples(self._stream, self.epoch, step, self.dataset_size,
                                    self.batch_size, self.seed, self.shuffle)  # fmt: skip

    def __iter__(self) -> Iterator[int]:
        if self._fallback is not None:
            yield from self._fallback
            return
        step = 0
        while True:
            indices, _, end = self.step(step)
            if end:
                return
            yield from indices.tolist()
            step += 1

    def __len__(self) -> int:
        if self._fallback is not None:
            return len(self._fallback)
        total, step = 0, 0
        while True:
            indices, _, end = self.step(step)
            if end:
                return total
            total, step = total + len(indices), step + 1

    def batches(self) -> ElasticBatchSampler:
        """The batch sampler a DataLoader over this sampler uses under rightsize: one batch a
        step, as the master cut it."""
        return ElasticBatchSampler(self)


class ElasticBatchSampler(Sampler[list[int]]):
    """One batch per step of an :class:`ElasticSampler` (the launcher puts it in the DataLoader
    in place of its ``BatchSampler``, whose fixed batch size would regroup the steps).

    It remembers which step each batch it gave belongs to, in order, so that the launcher can
    tell which steps the script has trained when it saves a checkpoint (:meth:`take`, called
    as the DataLoader returns each batch: DataLoaders return batches in order).
    """

    def __init__(self, sampler: ElasticSampler) -> None:
        self.sampler = sampler
        self.pending: deque[tuple[int, int]] = deque()  # (epoch, step) given, not yet returned

    @property
    def stream(self) -> int:
        return self.sampler._stream

    def __iter__(self) -> Iterator[list[int]]:
        self.pending.clear()  # a new pass: batches prefetched by the last one were never used
        epoch, step = self.sampler.epoch, 0
        while True:
            indices, _, end = self.sampler.step(step)
            if end:
                return
            self.pending.append((epoch, step))
            yield indices.tolist()
            step += 1

    def __len__(self) -> int:
        _, steps, _ = self.sampler.step(0)
        return steps

    def take(self) -> tuple[int, int] | None:
        """The (epoch, step) of the batch the DataLoader is returning now."""
        return self.pending.popleft() if self.pending else None
