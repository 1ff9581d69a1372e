"""A workload whose trained weights count how often each sample was applied.

The exactly-once check of the runtime reads the parameter servers' update logs,
which are bookkeeping the runtime itself keeps. This workload gives a check that
does not trust it: every sample ``i`` owns one weight in a dense vector and one
row of an embedding table, both starting at zero, and the loss is the *sum*
of the sample's weights. Its gradient is exactly 1 for every weight of a sample
in the batch and 0 elsewhere, so plain SGD with learning rate 1 (and no
momentum) lowers a weight by exactly 1 each time a gradient containing its
sample is applied: minus the trained weight is the count, exact in float32 up
to 2**24. The two tensors take the two paths of the runtime (dense tensors
pulled whole, embedding rows pulled and pushed sparsely) and, with two
parameter servers, land on different servers, so each server is checked on
its own.

Use it as a factory workload: ``workload: rightsize.workloads.counter:sample_counter``
with ``options: {samples: N}`` and ``training: {optimizer: sgd, lr: 1}``.
"""

from __future__ import annotations

import torch
from torch import nn

from rightsize.core.errors import SpecError
from rightsize.workloads.datasets import Batch, Dataset, DatasetInfo
from rightsize.workloads.workload import Workload

#: Largest count a float32 weight holds exactly, hence the most epochs a check can use.
EXACT_COUNT_LIMIT = 2**24
#: Most samples the counter accepts: two float32 weights per sample (8 bytes) stay small.
MAX_SAMPLES = 10_000_000


class SampleIndices(Dataset):
    """Samples ``0 .. n-1`` whose only feature is their own index."""

    def __init__(self, num_samples: int) -> None:
        super().__init__("sample-indices", DatasetInfo("indices", (1,)), num_samples, seed=0)

    def _gather(self, index: torch.Tensor) -> Batch:
        if index.numel() and (index.min() < 0 or index.max() >= self.num_samples):
            raise IndexError(f"sample index out of range 0..{self.num_samples - 1}")
        return (index.clone(),), torch.zeros(len(index))


class SampleCounter(nn.Module):
    """One dense weight and one embedding row per sample, all zero at the start."""

    def __init__(self, num_samples: int) -> None:
        super().__init__()
        self.dense = nn.Parameter(torch.zeros(num_samples))
        self.table = nn.Embedding(num_samples, 1)
        nn.init.zeros_(self.table.weight)

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.dense[index] + self.table(index).squeeze(-1)


def sum_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The sum of the batch's weights: a gradient of exactly 1 per weight of each sample."""
    return output.sum()


def sample_counter(samples: int = 4096) -> Workload:
    """The counting workload over ``samples`` samples.

    Raises:
        SpecError: ``samples`` is not a whole number in 1..MAX_SAMPLES.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise SpecError(f"{samples!r} must be a whole number in 1..{MAX_SAMPLES}", field="options.samples")
    return Workload(
        "sample-counter",
        SampleIndices(samples),
        lambda: SampleCounter(samples),
        sum_loss,
        {"samples": samples},
    )


def applied_counts(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per tensor of a trained counter, how often each sample was applied (int64).

    Raises:
        ValueError: a weight is not a whole non-positive number (not trained by the
            counter's rule: SGD at learning rate 1 without momentum).
    """
    counts = {}
    for name, value in params.items():
        flat = -value.detach().reshape(-1).double()
        if not torch.equal(flat, flat.round()) or bool((flat < 0).any()):
            raise ValueError(f"{name} is not a count: train the counter with sgd at lr 1")
        counts[name] = flat.long()
    return counts
