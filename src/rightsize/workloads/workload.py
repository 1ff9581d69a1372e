"""Workload: a model, the dataset it trains on and its loss — everything needed for one training step.

The profiler, the runtime and the packer all consume this one type. A user's
own training code becomes a workload by a factory function that returns one
(``my_pkg.train:make_job``), so rightsize can profile and run models it has
never seen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from rightsize.workloads.datasets import Batch, Dataset

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def classification_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the last dimension (works for per-token logits too)."""
    return nn.functional.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


def click_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy on logits, for click-through models."""
    return nn.functional.binary_cross_entropy_with_logits(output, target)


@dataclass(frozen=True)
class ParameterCount:
    """A model's parameters and the bytes they take."""

    parameters: int
    bytes: int


def count_on_meta(build: Callable[[], nn.Module]) -> ParameterCount:
    """Count the parameters of the model ``build`` makes, built on the ``meta`` device: nothing
    is allocated however large its options make it (raises whatever ``build`` raises)."""
    with torch.device("meta"):
        params = list(build().parameters())
    return ParameterCount(sum(p.numel() for p in params),
                          sum(p.numel() * p.element_size() for p in params))  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """One trainable job: ``build_model`` makes a fresh model, ``dataset`` feeds it.

    Attributes:
        name: the workload's name (zoo name or factory path).
        dataset: indexable training data.
        build_model: returns a new model; deterministic under ``torch.manual_seed``.
        loss_fn: ``loss_fn(model_output, target) -> scalar``.
        options: the model options it was built with (for reports).
    """

    name: str
    dataset: Dataset
    build_model: Callable[[], nn.Module] = field(repr=False)
    loss_fn: LossFn = field(default=classification_loss, repr=False)
    options: dict[str, Any] = field(default_factory=dict)

    def make_model(self, seed: int = 0, device: str | torch.device = "cpu") -> nn.Module:
        """A freshly initialised model on ``device``, identical for the same seed."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = self.build_model()
        return model.to(device)

    def batch(
        self, indices: Sequence[int] | torch.Tensor, device: str | torch.device = "cpu"
    ) -> Batch:
        return self.dataset.batch(indices, device)

    def example_batch(self, batch_size: int, device: str | torch.device = "cpu") -> Batch:
        """The first ``batch_size`` samples (wrapping around a small dataset)."""
        indices = torch.arange(batch_size) % len(self.dataset)
        return self.dataset.batch(indices, device)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Forward pass and loss for one batch."""
        inputs, target = batch
        return self.loss_fn(model(*inputs), target)

    @property
    def label(self) -> str:
        return f"{self.name} on {self.dataset.name}"
