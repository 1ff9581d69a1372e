"""Training one Hyperband rung in pack_opt's groups: the mechanism under Packed Hyperband (§5.2).

For each group the executor loads its trials' checkpoints, packs them, trains
them to the rung's step, evaluates them on the validation set and frees them
back to checkpoints. With ``alone`` set, a group of one is trained by plain
PyTorch instead (:func:`~rightsize.packing.alone.train_alone`): that is the
original, unpacked Hyperband the paper compares against. With a
:class:`~rightsize.packing.pool.WorkerPool` the groups are trained in parallel
worker processes, one per core, instead of one after another.

Resource unit: one unit of Hyperband's resource is ``steps_per_unit``
training steps, the same for every batch size, so all trials of a rung stand
on the same step of the shared stream and a pack shares one batch per step
for its whole life (see docs/tuning.md for why steps and not epochs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from rightsize.packing.alone import train_alone
from rightsize.packing.choices import STEPS_PER_UNIT
from rightsize.packing.data import DataStream
from rightsize.packing.pack import Clock, PackSettings, TrialResult, load, pack, train
from rightsize.packing.pool import WorkerPool
from rightsize.packing.trial import Architectures, TrialState


class RungExecutor:
    """Trains a rung's trials, group by group, and returns their validation losses.

    Args:
        architectures: builds each trial's workload.
        stream: the search's shared data stream.
        steps_per_unit: training steps per unit of resource.
        device: where trials are trained.
        settings: how packs are built.
        alone: train groups of one with plain PyTorch and this torch.optim
            implementation: ``fused`` or ``for-loop``; None packs them too.
        clock: wall-clock seconds.
        pool: worker processes to train the groups on beside this one
            (default: this process alone, one group after another).
    """

    def __init__(
        self,
        architectures: Architectures,
        stream: DataStream,
        steps_per_unit: int = STEPS_PER_UNIT,
        device: str | torch.device = "cpu",
        settings: PackSettings | None = None,
        alone: str | None = None,
        clock: Clock = time.perf_counter,
        pool: WorkerPool | None = None,
    ) -> None:
        self.architectures, self.stream, self.pool = architectures, stream, pool
        self.steps_per_unit, self.device = steps_per_unit, device
        self.settings = settings or PackSettings()
        if alone not in (None, "fused", "for-loop"):
            raise ValueError(f"alone must be None, 'fused' or 'for-loop', got {alone!r}")
        self.alone, self._clock = alone, clock
        self.trial_steps = 0  # steps trained, summed over trials

    def steps(self, resource: float) -> int:
        """Training steps for ``resource`` units (at least one)."""
        return max(1, round(resource * self.steps_per_unit))

    def train(
        self,
        states: Sequence[TrialState],
        groups: list[list[str]],
        resource: float | Sequence[float],
    ) -> tuple[dict[str, TrialState], dict[str, float], float]:
        """Train every trial to ``resource`` (one for all groups, or one per group: packed
        waves train several rungs at once); returns new states, validation losses, switch
        seconds."""
        by_id = {s.spec.trial_id: s for s in states}
        resources = [resource] * len(groups) if isinstance(resource, int | float) else resource
        targets = [self.steps(r) for r in resources]
        trained: dict[str, TrialState] = {}
        losses: dict[str, float] = {}
        switch_s = 0.0
        members = [[by_id[i] for i in group] for group in groups]
        if self.pool is not None:
            # one step for all: the largest group first; steps per group: the most trial-steps
            work = None if isinstance(resource, int | float) else [
                sum(t - m.step for m in group) for group, t in zip(members, targets, strict=True)
            ]  # fmt: skip
            outcomes = self.pool.run(members, targets, local=self, work=work)
        else:
            outcomes = [self.train_group(m, t) for m, t in zip(members, targets, strict=True)]
        for (results, seconds), target in zip(outcomes, targets, strict=True):
            switch_s += seconds
            for trial_id, result in results.items():
                trained[trial_id], losses[trial_id] = result.state, result.val_loss
                self.trial_steps += target - by_id[trial_id].step
        return trained, losses, switch_s

    def close(self) -> None:
        """Stop the worker processes, if any."""
        if self.pool is not None:
            self.pool.close()

    def train_group(
        self, members: list[TrialState], target: int
    ) -> tuple[dict[str, TrialResult], float]:
        """Train one group to ``target``: its results and the seconds its switches took."""
        if self.alone and len(members) == 1:
            state = members[0]
            result = train_alone(
                state, self.architectures, self.stream, target, self.device,
                fused_optimizer=self.alone == "fused", eval_rows=self.settings.eval_rows,
            )  # fmt: skip
            return {state.spec.trial_id: result}, 0.0
        loaded = [load(s, self.architectures, self.device) for s in members]
        packed = pack(loaded, self.stream, self.settings, self._clock)
        results = train(packed, {s.spec.trial_id: target for s in members})
        return results, sum(s.seconds for s in packed.switches if s.remaining)
