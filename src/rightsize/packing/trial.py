"""A trial: one configuration to train, and its checkpoint (packing paper §2.2).

§2.2 identifies a training task by four inputs: the model, the optimizer, the
batch size and the number of steps. :class:`TrialSpec` holds the first three
(the model as the workload's options, e.g. its activation, plus the seed its
weights are drawn from); the steps are what the caller asks for.
:class:`TrialState` is the checkpoint ``free`` returns and ``load`` takes:
the parameters, the optimizer's state ("stored with the model", §2.2), the
number of steps done and the trial's own random-number state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rightsize.packing.optimizers import OptimizerSpec, State
from rightsize.packing.space import Config
from rightsize.workloads.workload import Workload

ModelOptions = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class TrialSpec:
    """What to train: model options, optimizer, batch size, and the seed of its weights.

    Attributes:
        trial_id: unique within a search, e.g. ``s4-017``.
        batch_size: samples per step.
        optimizer: the trial's own optimizer and hyper-parameters.
        model_options: the workload's model options (the architecture), sorted.
        seed: seeds the initial weights and the trial's own random numbers.
        config: the sampled configuration it came from (for reports and distance).
    """

    trial_id: str
    batch_size: int
    optimizer: OptimizerSpec
    model_options: ModelOptions = ()
    seed: int = 0
    config: Config | None = None

    @property
    def architecture(self) -> ModelOptions:
        """Trials with equal model options have the same architecture (and can be fused)."""
        return self.model_options


def spec_from_config(
    config: Config, trial_id: str, seed: int, fixed: ModelOptions = ()
) -> TrialSpec:
    """A trial for one configuration of the space; ``fixed`` are model options set for all."""
    options = dict(fixed)
    options.update((k, v) for k, v in config.items if k not in ("batch_size", "optimizer", "lr"))
    return TrialSpec(
        trial_id=trial_id,
        batch_size=int(config["batch_size"]),
        optimizer=OptimizerSpec(config["optimizer"], float(config["lr"])),
        model_options=tuple(sorted(options.items())),
        seed=seed,
        config=config,
    )


def trial_seed(search_seed: int, *path: int) -> int:
    """A 31-bit seed for one trial, derived from the search seed and where it was sampled."""
    return int(np.random.SeedSequence([search_seed, *path]).generate_state(1)[0] >> 1)


@dataclass
class TrialState:
    """A trial's checkpoint, on the host. ``params is None`` means not started (fresh weights).

    Attributes:
        spec: the trial.
        step: training steps done.
        params: the model's state by name: its parameters and buffers (BatchNorm's
            running statistics, which evaluation after a resume reads).
        optimizer_state: per parameter name, ``torch.optim``-named state tensors.
        rng_state: the trial's CPU random-number state (for stochastic layers).
    """

    spec: TrialSpec
    step: int = 0
    params: dict[str, torch.Tensor] | None = None
    optimizer_state: dict[str, State] = field(default_factory=dict)
    rng_state: torch.Tensor | None = None

    def fresh(self) -> TrialState:
        """The same trial, not started (for Hyperband without resuming)."""
        return TrialState(self.spec)


def initial_rng_state(seed: int) -> torch.Tensor:
    """The CPU generator state a trial starts training with."""
    return torch.Generator().manual_seed(seed).get_state()


def host_copy(tensors: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Detached CPU copies of the tensors (a checkpoint never aliases live training tensors)."""
    return {n: t.detach().to("cpu", copy=True) for n, t in tensors.items() if torch.is_tensor(t)}


def build_model(
    workload: Workload, state: TrialState, device: str | torch.device
) -> torch.nn.Module:
    """The trial's model in training mode: fresh from its seed, or with its checkpoint's weights."""
    model = workload.make_model(state.spec.seed, device)
    model.train()
    if state.params is not None:
        model.load_state_dict(state.params)
    return model


class Architectures:
    """The workload built for each set of model options, built once and reused.

    Args:
        build: ``build(options) -> Workload``, e.g. a ``WorkloadRegistry.get`` bound
            to the workload's name and dataset.
    """

    def __init__(self, build: Callable[[dict[str, Any]], Workload]) -> None:
        self._build = build
        self._cache: dict[ModelOptions, Workload] = {}

    def workload(self, options: ModelOptions) -> Workload:
        if options not in self._cache:
            self._cache[options] = self._build(dict(options))
        return self._cache[options]
