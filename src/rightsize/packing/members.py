"""The parts of a pack: a fused group of same-architecture trials, or one trial on the general path.

Both kinds take the pack's shared batch and return the loss to differentiate
and each trial's own loss:

- :class:`FusedGroup` runs a fused model (see :mod:`rightsize.packing.fused`)
  on the group's largest batch; a trial with a smaller batch is padded (§3.1.1):
  its loss is the mean over its own first ``b`` rows, and the padding rows get
  weight zero, so they contribute nothing to its gradient. Only models whose
  samples do not interact are fused, which is what makes padding exact.
- :class:`PlainGroup` runs one trial's own model on exactly its slice of the
  batch (general path: different architectures, BatchNorm, Dropout, any loss).
  It restores the trial's own random-number state around its forward pass, so
  a stochastic layer draws what it would draw alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from rightsize.packing.fused import resize, set_segments
from rightsize.packing.optimizers import State
from rightsize.packing.trial import TrialSpec
from rightsize.workloads.datasets import Batch
from rightsize.workloads.workload import LossFn, classification_loss


@dataclass
class LoadedTrial:
    """A trial placed on the device by ``load``: its model, optimizer state and progress."""

    spec: TrialSpec
    model: nn.Module | None  # None once a fused group holds its weights
    loss_fn: LossFn
    optimizer_state: dict[str, State]
    step: int
    rng_state: torch.Tensor


def per_sample_loss(loss_fn: LossFn) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    """``f(out [n, B, C], target [B]) -> [n, B]`` for losses the fused path can split by sample."""
    if loss_fn is not classification_loss:
        return None

    def rows(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        n, batch = out.shape[:2]
        flat = F.cross_entropy(out.flatten(0, 1), target.repeat(n), reduction="none")
        return flat.view(n, batch)

    return rows


class FusedGroup:
    """Trials of one architecture trained as one fused model on a shared, padded batch.

    Trials come sorted by batch size, largest first, so the trials of one batch
    size are a contiguous block and the stacked layers can sum each trial's
    gradients over exactly its own rows (``fused.set_segments``).
    """

    def __init__(self, trials: list[LoadedTrial], fused: nn.Module, rows_loss) -> None:
        sizes = [t.spec.batch_size for t in trials]
        if sizes != sorted(sizes, reverse=True):
            raise ValueError(f"fused trials must come largest batch first, got {sizes}")
        self.trials, self.model, self._rows_loss = list(trials), fused, rows_loss
        self.names = [name for name, _ in fused.named_parameters()]
        self._reweigh()

    @property
    def rows(self) -> int:
        return self.trials[0].spec.batch_size

    def params(self) -> list[list[torch.Tensor]]:
        """Per trial, views of its parameters inside the stacked tensors."""
        stacked = [p.detach() for p in self.model.parameters()]
        return [[p[i] for p in stacked] for i in range(len(self.trials))]

    def loss(self, batch: Batch, report: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The sum of the trials' mean losses, and (if ``report``) each trial's loss.

        The sum is what is differentiated; a trial's term is its mean over its
        own rows, and padding rows count zero (``where`` also keeps a padding
        row's inf or NaN out of it). Reported losses are computed by the very
        call a trial makes alone, so they are its loss to the last bit.
        """
        (x,), target = batch
        out = self.model(x[: self.rows])
        rows = self._rows_loss(out, target[: self.rows]) * self._inverse_batch
        total = torch.where(self._mask, rows, 0.0).sum()
        if not report:
            return total, []
        with torch.no_grad():
            losses = [
                t.loss_fn(out[i, : t.spec.batch_size], target[: t.spec.batch_size])
                for i, t in enumerate(self.trials)
            ]
        return total, losses

    def grads(self) -> list[list[torch.Tensor]]:
        stacked = [p.grad.unbind(0) for p in self.model.parameters()]
        return [[g[i] for g in stacked] for i in range(len(self.trials))]

    def clear_grads(self) -> None:
        for p in self.model.parameters():
            p.grad = None

    def validation_sums(self, batches: list[Batch]) -> list[list[torch.Tensor]]:
        """Per trial, its loss times the rows of each batch (computed as alone: same call)."""
        sums: list[list[torch.Tensor]] = [[] for _ in self.trials]
        with torch.no_grad():
            for (x,), target in batches:
                out = self.model(x)
                for i, trial in enumerate(self.trials):
                    sums[i].append(trial.loss_fn(out[i], target) * len(target))
        return sums

    def export(self, index: int) -> dict[str, torch.Tensor]:
        return {
            n: p.detach()[index] for n, p in zip(self.names, self.model.parameters(), strict=True)
        }

    def remove(self, indices: Sequence[int]) -> None:
        """Drop trials, restacking the others once (§3.1.2's repacking)."""
        keep = [i for i in range(len(self.trials)) if i not in set(indices)]
        resize(self.model, torch.tensor(keep, device=self._mask.device))
        self.trials = [self.trials[i] for i in keep]
        self._reweigh()

    def _reweigh(self) -> None:
        # row r of trial i counts 1/b_i when r < b_i (its mean), nothing in the padding
        device = next(self.model.parameters()).device
        sizes = [t.spec.batch_size for t in self.trials]
        batch = torch.tensor(sizes, device=device)[:, None]
        self._mask = torch.arange(self.rows, device=device) < batch
        self._inverse_batch = 1.0 / batch.to(torch.float32)
        set_segments(self.model, sizes)


class PlainGroup:
    """One trial on the general path: its own model on exactly its slice of the shared batch."""

    def __init__(self, trial: LoadedTrial) -> None:
        self.trials = [trial]
        self.model = trial.model
        self.names = [name for name, _ in self.model.named_parameters()]

    @property
    def rows(self) -> int:
        return self.trials[0].spec.batch_size

    def params(self) -> list[list[torch.Tensor]]:
        return [[p.detach() for p in self.model.parameters()]]

    def loss(self, batch: Batch, report: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        inputs, target = batch
        trial, rows = self.trials[0], self.rows
        with _own_rng(trial):
            loss = trial.loss_fn(self.model(*(t[:rows] for t in inputs)), target[:rows])
        return loss, [loss.detach()] if report else []

    def grads(self) -> list[list[torch.Tensor]]:
        return [[p.grad for p in self.model.parameters()]]

    def clear_grads(self) -> None:
        for p in self.model.parameters():
            p.grad = None

    def validation_sums(self, batches: list[Batch]) -> list[list[torch.Tensor]]:
        trial = self.trials[0]
        self.model.eval()
        with torch.no_grad(), _own_rng(trial):
            sums = [
                trial.loss_fn(self.model(*inputs), target) * len(target)
                for inputs, target in batches
            ]
        self.model.train()
        return [sums]

    def export(self, index: int) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self.model.named_parameters()}


class _own_rng:  # noqa: N801 - used like a function, as a context manager
    """Swap the global CPU generator to a trial's own state, and save it back afterwards."""

    def __init__(self, trial: LoadedTrial) -> None:
        self.trial = trial

    def __enter__(self) -> None:
        self.saved = torch.get_rng_state()
        torch.set_rng_state(self.trial.rng_state)

    def __exit__(self, *exc) -> None:
        self.trial.rng_state = torch.get_rng_state()
        torch.set_rng_state(self.saved)
