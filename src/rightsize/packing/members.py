"""The parts of a pack: a fused group of same-architecture trials, or one trial on the general path.

Both kinds take the pack's shared batch and return the loss to differentiate
and each trial's own loss:

- :class:`FusedGroup` runs a fused model (see :mod:`rightsize.packing.fused`)
  on the group's largest batch; a trial with a smaller batch is padded (§3.1.1):
  its loss is the mean over its own first ``b`` rows, and the padding rows get
  weight zero, so they contribute nothing to its gradient. Only models whose
  samples do not interact are fused, which is what makes padding exact. In the
  ragged layout (:mod:`rightsize.packing.ragged`) nothing is padded: each trial's
  rows are its own block and its loss the mean over that block.
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

from rightsize.packing.direct import DirectStep
from rightsize.packing.fused import resize, set_blocks, set_segments
from rightsize.packing.optimizers import OptimizerSpec, State, stack_state, stackable
from rightsize.packing.ragged import mean_weights, spans
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
    """``f(out [n, B, C], target [B]) -> [n, B]`` (ragged: ``[rows, C], [rows] -> [rows]``)
    for losses the fused path can split by sample."""
    if loss_fn is not classification_loss:
        return None

    def rows(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if out.dim() == 2:  # ragged: [rows, C], targets already per row
            return F.cross_entropy(out, target, reduction="none")
        n, batch = out.shape[:2]
        flat = F.cross_entropy(out.flatten(0, 1), target.repeat(n), reduction="none")
        return flat.view(n, batch)

    return rows


Pick = tuple[int, "slice | int"]  # (parameter index, trials of the stacked tensor)


class FusedGroup:
    """Trials of one architecture trained as one fused model on a shared batch.

    Padded (default): trials come sorted by batch size, largest first, so the
    trials of one batch size are a contiguous block and the stacked layers can
    sum each trial's gradients over exactly its own rows (``fused.set_segments``).
    Ragged (``ragged=True``): any order; trial ``i`` owns rows ``blocks[i]`` of
    every activation. Trials with one optimizer spec next to each other are
    updated as one stacked tensor (:meth:`optimizer_members`).
    """

    def __init__(
        self,
        trials: list[LoadedTrial],
        fused: nn.Module,
        rows_loss,
        ragged: bool = False,
        direct: DirectStep | None = None,
    ) -> None:
        sizes = [t.spec.batch_size for t in trials]
        if not ragged and sizes != sorted(sizes, reverse=True):
            raise ValueError(f"fused trials must come largest batch first, got {sizes}")
        if direct is not None and not ragged:
            raise ValueError("a direct step needs the ragged layout")
        self.trials, self.model, self._rows_loss = list(trials), fused, rows_loss
        self.ragged, self.direct = ragged, direct
        self.names = [name for name, _ in fused.named_parameters()]
        self._picks: list[list[Pick]] = []
        self._grad_views: tuple[list, list[list[torch.Tensor]]] | None = None
        self._reweigh()

    @property
    def rows(self) -> int:
        return max(t.spec.batch_size for t in self.trials)

    def params(self) -> list[list[torch.Tensor]]:
        """Per trial, views of its parameters inside the stacked tensors."""
        stacked = [p.detach() for p in self.model.parameters()]
        return [[p[i] for p in stacked] for i in range(len(self.trials))]

    def loss(
        self, batch: Batch, report: bool = False
    ) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """The sum of the trials' mean losses, and (if ``report``) each trial's loss.

        The sum is what is differentiated; a trial's term is its mean over its
        own rows, and padding rows count zero (``where`` also keeps a padding
        row's inf or NaN out of it). Reported losses are computed by the very
        call a trial makes alone, so they are its loss to the last bit. With a
        :attr:`direct` step the gradients are computed here, and the sum is None.
        """
        (x,), target = batch
        if self.direct is not None:
            out = self.direct.run(x[: self.rows], target[self._targets], self._row_weight,
                                  self._sizes)  # fmt: skip
            return None, self._reported(out, target) if report else []
        if self.ragged:
            return self._ragged_loss(x, target, report)
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

    def _ragged_loss(self, x, target, report: bool):
        self._layout(self._sizes)
        out = self.model(x[: self.rows])
        total = (self._rows_loss(out, target[self._targets]) * self._row_weight).sum()
        return total, self._reported(out, target) if report else []

    def _reported(self, out: torch.Tensor, target: torch.Tensor) -> list[torch.Tensor]:
        """Each trial's loss from ragged outputs, by the call it makes alone."""
        with torch.no_grad():
            return [
                t.loss_fn(out[lo:hi], target[: hi - lo])
                for t, (lo, hi) in zip(self.trials, self._blocks, strict=True)
            ]

    def optimizer_members(self, stack: bool = True) -> list[tuple[OptimizerSpec, list, list]]:
        """(spec, parameters, states) per optimizer unit: a trial, or a run of trials stacked.

        With ``stack``, consecutive trials with one spec share one stacked view
        of each parameter whose state can be stacked (``optimizers.stackable``);
        their state dicts become views of the stacked state. :meth:`grads`
        returns gradients in the same units.
        """
        stacked = [p.detach() for p in self.model.parameters()]
        members, self._picks, self._grad_views = [], [], None
        own = [[t.optimizer_state.setdefault(n, {}) for n in self.names] for t in self.trials]
        for lo, hi in self._spec_runs() if stack else [(i, i + 1) for i in range(len(self.trials))]:
            spec = self.trials[lo].spec.optimizer
            params, states, picks = [], [], []
            for j, param in enumerate(stacked):
                trial_states = [own[i][j] for i in range(lo, hi)]
                if stackable(spec, param[lo], trial_states):
                    picks.append((j, slice(lo, hi)))
                    states.append(stack_state(spec, param[lo:hi], trial_states))
                else:
                    picks += [(j, i) for i in range(lo, hi)]
                    states += trial_states
            params = [stacked[j][pick] for j, pick in picks]
            members.append((spec, params, states))
            self._picks.append(picks)
        return members

    def grads(self) -> list[list[torch.Tensor]]:
        """Gradients per optimizer unit of the last :meth:`optimizer_members`."""
        full = [p.grad for p in self._params]
        kept = self._grad_views
        # the direct step writes every step's gradients into the same tensors: keep their views
        if kept is None or not all(a is b for a, b in zip(full, kept[0], strict=True)):
            kept = self._grad_views = (
                full, [[full[j][pick] for j, pick in picks] for picks in self._picks]
            )  # fmt: skip
        return kept[1]

    def clear_grads(self) -> None:
        for p in self._params:  # cached: model.parameters() walks every module each call
            p.grad = None

    def validation_sums(self, batches: list[Batch]) -> list[list[torch.Tensor]]:
        """Per trial, its loss times the rows of each batch (computed as alone: same call)."""
        sums: list[list[torch.Tensor]] = [[] for _ in self.trials]
        with torch.no_grad():
            for (x,), target in batches:
                if self.ragged:
                    self._layout([len(target)] * len(self.trials))
                    out = self.model(x).view(len(self.trials), len(target), -1)
                else:
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
        device = next(self.model.parameters()).device
        resize(self.model, torch.tensor(keep, device=device))
        self.trials = [self.trials[i] for i in keep]
        self._reweigh()

    def _spec_runs(self) -> list[tuple[int, int]]:
        runs: list[tuple[int, int]] = []
        for i, trial in enumerate(self.trials):
            if runs and self.trials[runs[-1][0]].spec.optimizer == trial.spec.optimizer:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        return runs

    def _layout(self, rows: list[int]) -> None:
        if rows != self._current:
            set_blocks(self.model, rows)
            self._current = rows

    def _reweigh(self) -> None:
        self._params = list(self.model.parameters())  # resize() replaces them
        device = self._params[0].device
        sizes = [t.spec.batch_size for t in self.trials]
        self._current: list[int] | None = None
        if self.ragged:
            # row r of trial i's block counts 1/b_i (its mean) against target r of the batch
            self._sizes = sizes
            self._blocks = spans(sizes)
            self._targets = torch.cat([torch.arange(b, device=device) for b in sizes])
            self._row_weight = mean_weights(sizes, device)
            return
        # row r of trial i counts 1/b_i when r < b_i (its mean), nothing in the padding
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
        self._params = list(self.model.parameters())

    @property
    def rows(self) -> int:
        return self.trials[0].spec.batch_size

    def params(self) -> list[list[torch.Tensor]]:
        return [[p.detach() for p in self.model.parameters()]]

    def optimizer_members(self, stack: bool = True) -> list[tuple[OptimizerSpec, list, list]]:
        """The trial's optimizer spec, parameters and state dicts (one unit; ``stack`` is moot)."""
        trial = self.trials[0]
        states = [trial.optimizer_state.setdefault(name, {}) for name in self.names]
        return [(trial.spec.optimizer, self.params()[0], states)]

    def loss(self, batch: Batch, report: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        inputs, target = batch
        trial, rows = self.trials[0], self.rows
        with _own_rng(trial):
            loss = trial.loss_fn(self.model(*(t[:rows] for t in inputs)), target[:rows])
        return loss, [loss.detach()] if report else []

    def grads(self) -> list[list[torch.Tensor]]:
        return [[p.grad for p in self._params]]

    def clear_grads(self) -> None:
        for p in self._params:
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
        return self.model.state_dict()  # buffers too: the general path takes BatchNorm


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
