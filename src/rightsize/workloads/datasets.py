"""Datasets: deterministic synthetic data shaped like ImageNet, CIFAR, Criteo and text, and digits.

Nothing is downloaded. Synthetic sets serve what Srift uses them for — data with
the real shapes, so compute and communication are real — and they are learnable:
labels come from a fixed random "teacher" over the inputs, so loss falls when a
model trains. Each synthetic set draws a bank of distinct samples once from its
seed (bounded in memory) and maps sample index ``i`` to a bank row, so that
``batch(indices)`` is a cheap gather, identical for the same seed and indices in
any process. scikit-learn's bundled 8x8 digits (1,797 real images) is the small
real set.

Every dataset returns batches as ``(inputs, target)`` where ``inputs`` is a tuple
of tensors passed positionally to the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from rightsize.core.errors import unknown_name

Batch = tuple[tuple[torch.Tensor, ...], torch.Tensor]

BANK_BYTES = 64 * 2**20  # memory one synthetic bank may take
BANK_MAX_ROWS = 65536


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know to fit a dataset.

    Attributes:
        kind: ``image`` (C,H,W + classes), ``tokens`` (next-token prediction),
            ``sequence`` (sequence classification) or ``criteo`` (dense +
            categorical features, binary click label).
    """

    kind: str
    input_shape: tuple[int, ...] = ()
    num_classes: int = 0
    vocab_size: int = 0
    num_dense: int = 0
    cardinalities: tuple[int, ...] = ()


class Dataset(ABC):
    """Indexable samples ``0 .. num_samples-1`` with a vectorized ``batch``."""

    def __init__(self, name: str, info: DatasetInfo, num_samples: int, seed: int) -> None:
        self.name, self.info, self.num_samples, self.seed = name, info, num_samples, seed

    def batch(
        self, indices: Sequence[int] | torch.Tensor, device: str | torch.device = "cpu"
    ) -> Batch:
        index = torch.as_tensor(indices, dtype=torch.long)
        inputs, target = self._gather(index)
        return tuple(t.to(device) for t in inputs), target.to(device)

    @abstractmethod
    def _gather(self, index: torch.Tensor) -> Batch:
        """The samples at ``index`` (a 1-D long tensor), on the CPU."""

    def __len__(self) -> int:
        return self.num_samples

    def resident_bytes(self) -> int:
        """Bytes the dataset keeps in memory once used (the runtime's memory floors)."""
        return self._sample_bytes() * self._resident_rows()

    def _resident_rows(self) -> int:
        return self.num_samples

    def _sample_bytes(self) -> int:
        inputs, target = self._gather(torch.zeros(1, dtype=torch.long))
        return sum(t.element_size() * t.numel() for t in (*inputs, target))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, n={self.num_samples}, seed={self.seed})"


class BankDataset(Dataset):
    """A synthetic dataset whose samples repeat a bank of distinct rows drawn from the seed."""

    def __init__(
        self,
        name: str,
        info: DatasetInfo,
        num_samples: int,
        seed: int,
        draw: Callable[[np.random.Generator, int], Batch],
        row_bytes: int,
    ) -> None:
        super().__init__(name, info, num_samples, seed)
        self._draw = draw
        self.bank_rows = int(
            max(16, min(BANK_MAX_ROWS, num_samples, BANK_BYTES // max(1, row_bytes)))
        )

    def _resident_rows(self) -> int:
        return self.bank_rows  # samples repeat the bank's rows

    @cached_property
    def _bank(self) -> Batch:
        return self._draw(np.random.default_rng(self.seed), self.bank_rows)

    def _gather(self, index: torch.Tensor) -> Batch:
        if index.numel() and (index.min() < 0 or index.max() >= self.num_samples):
            raise IndexError(f"sample index out of range 0..{self.num_samples - 1}")
        rows = index % self.bank_rows
        inputs, target = self._bank
        return tuple(t[rows] for t in inputs), target[rows]


class DigitsDataset(Dataset):
    """scikit-learn's bundled handwritten digits: 1,797 images of 1x8x8, 10 classes."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__("digits", DatasetInfo("image", (1, 8, 8), num_classes=10), 1797, seed)

    @cached_property
    def _data(self) -> Batch:
        from sklearn.datasets import load_digits  # imported late: sklearn is slow to import

        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        return (images,), torch.tensor(digits.target, dtype=torch.long)

    def _gather(self, index: torch.Tensor) -> Batch:
        (images,), target = self._data
        return (images[index],), target[index]


# -- synthetic generators ---------------------------------------------------------------


def _teacher_labels(features: np.ndarray, classes: int, rng: np.random.Generator) -> np.ndarray:
    """Labels from a fixed random linear teacher, so the task is learnable."""
    weights = rng.standard_normal((features.shape[1], classes)).astype(np.float32)
    return (features @ weights).argmax(axis=1)


def _images(
    shape: tuple[int, int, int], classes: int
) -> Callable[[np.random.Generator, int], Batch]:
    def draw(rng: np.random.Generator, rows: int) -> Batch:
        images = rng.standard_normal((rows, *shape), dtype=np.float32)
        c, h, w = shape
        pooled = images.reshape(rows, c, 4, h // 4, 4, w // 4).mean(axis=(3, 5)).reshape(rows, -1)
        labels = _teacher_labels(pooled, classes, rng)
        return (torch.from_numpy(images),), torch.from_numpy(labels).long()

    return draw


def _markov_tokens(vocab: int, length: int, rng: np.random.Generator, rows: int) -> np.ndarray:
    """Token rows from a random first-order Markov chain with 4 likely successors per token."""
    successors = rng.integers(0, vocab, size=(vocab, 4))
    tokens = np.empty((rows, length), dtype=np.int64)
    tokens[:, 0] = rng.integers(0, vocab, size=rows)
    choice = rng.integers(0, 4, size=(rows, length))
    noise = rng.random((rows, length)) < 0.1
    random_tokens = rng.integers(0, vocab, size=(rows, length))
    for t in range(1, length):
        nxt = successors[tokens[:, t - 1], choice[:, t]]
        tokens[:, t] = np.where(noise[:, t], random_tokens[:, t], nxt)
    return tokens


def _next_tokens(vocab: int, block: int) -> Callable[[np.random.Generator, int], Batch]:
    def draw(rng: np.random.Generator, rows: int) -> Batch:
        tokens = torch.from_numpy(_markov_tokens(vocab, block + 1, rng, rows))
        return (tokens[:, :-1].contiguous(),), tokens[:, 1:].contiguous()

    return draw


def _sequence_classes(
    vocab: int, length: int, classes: int
) -> Callable[[np.random.Generator, int], Batch]:
    def draw(rng: np.random.Generator, rows: int) -> Batch:
        tokens = _markov_tokens(vocab, length, rng, rows)
        histogram = np.stack([np.bincount(r % 64, minlength=64) for r in tokens]).astype(np.float32)
        labels = _teacher_labels(histogram, classes, rng)
        return (torch.from_numpy(tokens),), torch.from_numpy(labels).long()

    return draw


def _criteo(
    cardinalities: tuple[int, ...], num_dense: int
) -> Callable[[np.random.Generator, int], Batch]:
    def draw(rng: np.random.Generator, rows: int) -> Batch:
        dense = np.log1p(rng.lognormal(1.0, 1.5, size=(rows, num_dense))).astype(np.float32)
        # Zipf-like ids: a few hot rows per table, as in real click logs
        ids = [(rng.zipf(1.2, size=rows) - 1) % card for card in cardinalities]
        sparse = np.stack(ids, axis=1).astype(np.int64)
        field_weights = [rng.standard_normal(min(card, 1024)) * 0.5 for card in cardinalities]
        logit = dense @ rng.standard_normal(num_dense) * 0.3 - 1.0
        logit += sum(w[sparse[:, j] % len(w)] for j, w in enumerate(field_weights))
        clicks = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        return (torch.from_numpy(dense), torch.from_numpy(sparse)), torch.from_numpy(clicks)

    return draw


# Criteo Kaggle's 26 categorical fields (the cardinalities DLRM uses).
CRITEO_KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip

#: Rows per table after hashing the long-tail fields into buckets (the usual
#: "hashing trick"): 7 fields at 100,000, the other 19 at their real sizes
#: (840,543 rows), so Wide&Deep/DeepFM hold ~14.4M parameters instead of ~574M
#: while the skew between tiny and huge tables — what makes one PS hot — stays.
CRITEO_MAX_ROWS = 100_000
CRITEO_CARDINALITIES: tuple[int, ...] = tuple(
    min(c, CRITEO_MAX_ROWS) for c in CRITEO_KAGGLE_CARDINALITIES
)


@dataclass(frozen=True)
class DatasetEntry:
    """How to build one named dataset, and its default size."""

    name: str
    description: str
    info: DatasetInfo
    default_samples: int
    draw: Callable[[np.random.Generator, int], Batch] | None = field(default=None, repr=False)

    def row_bytes(self) -> int:
        info = self.info
        values = int(np.prod(info.input_shape)) if info.input_shape else 0
        return 4 * (values + info.num_dense + len(info.cardinalities) + 1)


def builtin_datasets() -> dict[str, DatasetEntry]:
    """The datasets rightsize ships, by name."""
    entries = [
        DatasetEntry(
            "synthetic-imagenet", "ImageNet-shaped images 3x224x224, 1000 classes",
            DatasetInfo("image", (3, 224, 224), num_classes=1000), 1_281_167,
            _images((3, 224, 224), 1000),
        ),
        DatasetEntry(
            "synthetic-cifar", "CIFAR-shaped images 3x32x32, 10 classes",
            DatasetInfo("image", (3, 32, 32), num_classes=10), 50_000, _images((3, 32, 32), 10),
        ),
        DatasetEntry(
            "synthetic-criteo", "Criteo-shaped clicks: 13 dense + 26 categorical features",
            DatasetInfo("criteo", num_dense=13, cardinalities=CRITEO_CARDINALITIES), 1_000_000,
            _criteo(CRITEO_CARDINALITIES, 13),
        ),
        DatasetEntry(
            "synthetic-text", "Markov-chain token windows of 128 for next-token prediction",
            DatasetInfo("tokens", (128,), vocab_size=8192), 100_000, _next_tokens(8192, 128),
        ),
        DatasetEntry(
            "synthetic-reviews", "token sequences of 64 with a binary label (sequence classification)",
            DatasetInfo("sequence", (64,), num_classes=2, vocab_size=8192), 50_000,
            _sequence_classes(8192, 64, 2),
        ),
        DatasetEntry(
            "digits", "scikit-learn's bundled handwritten digits, 1x8x8, 10 classes (real data)",
            DatasetInfo("image", (1, 8, 8), num_classes=10), 1797,
        ),
    ]  # fmt: skip
    return {entry.name: entry for entry in entries}


def make_dataset(name: str, num_samples: int | None = None, seed: int = 0) -> Dataset:
    """Build a dataset by name.

    Args:
        name: one of :func:`builtin_datasets`.
        num_samples: nominal size of a synthetic set (digits is always 1,797).
        seed: the seed its samples are drawn from.

    Raises:
        UnknownNameError: an unknown dataset name.
    """
    entries = builtin_datasets()
    if name not in entries:
        raise unknown_name("dataset", name, entries)
    entry = entries[name]
    if entry.draw is None:
        return DigitsDataset(seed)
    size = num_samples or entry.default_samples
    return BankDataset(name, entry.info, size, seed, entry.draw, entry.row_bytes())
