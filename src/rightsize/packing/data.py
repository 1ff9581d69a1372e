"""The shared input stream: which samples a trial sees at each step (packing paper §3.1.1, §3.2).

Packed trials read one stream of batches (§3.2: "input1 and input2 refer to
the same dataset ... refer to the same input"). For packing never to change a
trial's result, a trial's data must not depend on whom it is packed with, so
the stream is a property of the search, not of a pack:

- The dataset's distinct samples are split once into training and validation
  sets by a fixed permutation (``split_seed``); ``validation_fraction`` of them
  (20% by default: 359 of digits' 1,797 images) are held out.
- Training positions run through the concatenation of epoch permutations of
  the training set (epoch ``e`` is permuted by ``(seed, e)``). Step ``t`` owns
  the block of ``width`` positions starting at ``t * width``.
- A trial with batch ``b`` trains at step ``t`` on the first ``b`` samples of
  block ``t`` (§3.1.1: the batch of the largest size is shared and each
  trial takes its slice; the rest are discarded). ``width`` is the largest
  batch of the search, so every trial's slice exists, alone or packed.

A pack gathers block ``t`` once, at its largest member's batch; a trial
trained alone gathers its own slice. Synthetic datasets repeat a bank of
distinct rows, so the split covers only the distinct ones (no sample is in
both sets).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from rightsize.core.errors import SpecError
from rightsize.workloads.datasets import Batch, Dataset

VALIDATION_FRACTION = 0.2  # held-out share of the distinct samples
SPLIT_SEED = 0  # fixed: the validation set is the same for every search seed
EVAL_ROWS = 512  # validation samples per forward pass


class DataStream:
    """Training batches by step, and the validation set, for one search.

    Args:
        dataset: the data every trial trains on.
        width: samples per step block; at least the largest batch trained.
        seed: orders the training samples.
        device: where batches are placed.
        validation_fraction: held-out share of the distinct samples.
        split_seed: orders the train/validation split.
    """

    def __init__(
        self,
        dataset: Dataset,
        width: int,
        seed: int = 0,
        device: str | torch.device = "cpu",
        validation_fraction: float = VALIDATION_FRACTION,
        split_seed: int = SPLIT_SEED,
    ) -> None:
        distinct = min(len(dataset), getattr(dataset, "bank_rows", len(dataset)))
        held_out = round(distinct * validation_fraction)
        if width < 1 or held_out < 1 or distinct - held_out < width:
            raise SpecError(
                f"dataset {dataset.name} has {distinct} distinct samples: too few for a "
                f"{validation_fraction:.0%} validation split and batches of {width}"
            )
        order = np.random.default_rng(split_seed).permutation(distinct)
        self.dataset, self.width, self.seed = dataset, width, seed
        self.device = torch.device(device)
        self.val_indices = torch.as_tensor(np.sort(order[:held_out]))
        self.train_indices = torch.as_tensor(order[held_out:])
        self._epoch = lru_cache(maxsize=4)(self._permutation)
        self._validation: dict[int, list[Batch]] = {}

    def rows(self, step: int, batch: int) -> torch.Tensor:
        """Sample indices of the first ``batch`` positions of step ``step``'s block."""
        if not 1 <= batch <= self.width:
            raise ValueError(f"batch {batch} outside 1..{self.width} (the stream's width)")
        start = step * self.width
        pieces, size = [], len(self.train_indices)
        while batch > 0:
            epoch, offset = divmod(start, size)
            take = min(batch, size - offset)
            pieces.append(self._epoch(epoch)[offset : offset + take])
            start, batch = start + take, batch - take
        return self.train_indices[torch.cat(pieces) if len(pieces) > 1 else pieces[0]]

    def batch(self, step: int, batch: int) -> Batch:
        """The first ``batch`` samples of step ``step``, on the stream's device."""
        return self.dataset.batch(self.rows(step, batch), self.device)

    def validation(self, rows: int = EVAL_ROWS) -> list[Batch]:
        """The validation set in chunks of ``rows`` samples (gathered once)."""
        if rows not in self._validation:
            chunks = torch.split(self.val_indices, rows)
            self._validation[rows] = [self.dataset.batch(c, self.device) for c in chunks]
        return self._validation[rows]

    def mean_loss(self, chunk_sums: list[torch.Tensor]) -> float:
        """Mean validation loss from per-chunk ``loss * rows`` (one formula for packed and alone)."""
        return float(torch.stack(chunk_sums).sum() / len(self.val_indices))

    def _permutation(self, epoch: int) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, epoch])
        return torch.as_tensor(rng.permutation(len(self.train_indices)))
