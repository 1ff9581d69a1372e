"""One trial trained by itself with plain PyTorch: the isolation reference and the no-packing baseline.

This is what a user writes without rightsize, and what §2.2's isolation
guarantee is measured against: the trial's own ``nn.Module`` built from its
seed, its own ``torch.optim`` optimizer, and at each step its own slice of the
search's stream (:mod:`rightsize.packing.data`), gathered for it alone. It
reads and writes the same :class:`~rightsize.packing.trial.TrialState` as a
pack, so a trial can pause in one and resume in the other.
"""

from __future__ import annotations

import torch

from rightsize.packing.data import EVAL_ROWS, DataStream
from rightsize.packing.optimizers import torch_optimizer
from rightsize.packing.pack import TrialResult
from rightsize.packing.trial import (
    Architectures,
    TrialState,
    build_model,
    host_copy,
    initial_rng_state,
)
from rightsize.workloads.workload import Workload


class AloneTrainer:
    """One trial's own model and ``torch.optim`` optimizer, stepping through the stream.

    It has a pack's ``train_step``, so whoever times a step (the pack gate,
    :mod:`rightsize.packing.probe`) times the two the same way.
    """

    def __init__(
        self,
        state: TrialState,
        architectures: Architectures,
        stream: DataStream,
        device: str | torch.device = "cpu",
        fused_optimizer: bool = False,
    ) -> None:
        self.spec, self.stream, self.step = state.spec, stream, state.step
        self.workload = architectures.workload(state.spec.model_options)
        self.model = build_model(self.workload, state, device)
        self.optimizer = torch_optimizer(
            state.spec.optimizer, self.model.parameters(), fused=fused_optimizer or None
        )
        self.named = dict(self.model.named_parameters())
        for name, tensors in state.optimizer_state.items():
            self.optimizer.state[self.named[name]] = {
                k: t.to(device, copy=True) for k, t in tensors.items()
            }

    def train_step(self) -> torch.Tensor:
        """One step on the trial's slice of the stream; its training loss (not synchronised)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.workload.loss(self.model, self.stream.batch(self.step, self.spec.batch_size))
        loss.backward()
        self.optimizer.step()
        self.step += 1
        return loss.detach()


def train_alone(
    state: TrialState,
    architectures: Architectures,
    stream: DataStream,
    target_step: int,
    device: str | torch.device = "cpu",
    fused_optimizer: bool = False,
    validate: bool = True,
    eval_rows: int = EVAL_ROWS,
) -> TrialResult:
    """Train ``state``'s trial from its step to ``target_step`` on its own.

    Args:
        fused_optimizer: build the ``torch.optim`` optimizer with ``fused=True``
            (default: ``torch.optim``'s default implementation, as users get it).
    """
    spec = state.spec
    trainer = AloneTrainer(state, architectures, stream, device, fused_optimizer)
    losses = []
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(
            state.rng_state if state.rng_state is not None else initial_rng_state(spec.seed)
        )
        while trainer.step < target_step:
            losses.append(trainer.train_step())
        val_loss = (
            validation_loss(trainer.workload, trainer.model, stream, eval_rows)
            if validate
            else None
        )
        rng_state = torch.get_rng_state()
    optimizer, named = trainer.optimizer, trainer.named
    checkpoint = TrialState(
        spec=spec,
        step=max(state.step, target_step),
        params=host_copy(trainer.model.state_dict()),
        optimizer_state={
            n: host_copy(optimizer.state[p]) for n, p in named.items() if optimizer.state[p]
        },
        rng_state=rng_state,
    )
    return TrialResult(checkpoint, torch.stack(losses).tolist() if losses else [], val_loss)


def validation_loss(
    workload: Workload, model: torch.nn.Module, stream: DataStream, rows: int
) -> float:
    """Mean loss over the stream's validation set, in chunks of ``rows``, in eval mode."""
    model.eval()
    with torch.no_grad():
        sums = [workload.loss(model, batch) * len(batch[1]) for batch in stream.validation(rows)]
    model.train()
    return stream.mean_loss(sums)
