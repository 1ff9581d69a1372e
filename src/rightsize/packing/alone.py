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
    workload = architectures.workload(spec.model_options)
    model = build_model(workload, state, device)
    optimizer = torch_optimizer(spec.optimizer, model.parameters(), fused=fused_optimizer or None)
    named = dict(model.named_parameters())
    for name, tensors in state.optimizer_state.items():
        optimizer.state[named[name]] = {k: t.to(device, copy=True) for k, t in tensors.items()}
    losses = []
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(
            state.rng_state if state.rng_state is not None else initial_rng_state(spec.seed)
        )
        for step in range(state.step, target_step):
            optimizer.zero_grad(set_to_none=True)
            loss = workload.loss(model, stream.batch(step, spec.batch_size))
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        val_loss = validation_loss(workload, model, stream, eval_rows) if validate else None
        rng_state = torch.get_rng_state()
    checkpoint = TrialState(
        spec=spec,
        step=max(state.step, target_step),
        params=host_copy(model.state_dict()),
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
