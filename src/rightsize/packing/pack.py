"""The pack primitive: ``load``, ``pack``, ``free`` (packing paper §2.2, §3.1).

- ``load(checkpoint, device)`` places a trial's model and optimizer state on the device.
- ``pack(trials)`` builds one training step for all of them on one shared
  input stream (§3.2): trials of one architecture are fused into one model
  (:class:`~rightsize.packing.members.FusedGroup`), the others run their own
  models (:class:`~rightsize.packing.members.PlainGroup`) on the same batch.
  One backward pass and one vectorized optimizer update serve every trial.
- ``free(pack, trial)`` checkpoints a trial back to the host and repacks the
  rest (§3.1.2: when trials need different step counts, the one that finishes
  leaves and the pack is reconfigured). The time each switch takes is recorded.

Isolation (§2.2): a trial trained in a pack gets the same batches (see
:mod:`rightsize.packing.data`), the same initial weights and the same optimizer
math as alone, and nothing of another trial reaches its loss or gradient, so
its losses and parameters equal those of the same trial trained alone up to
float rounding of batched against single products (tests bound it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from rightsize.core.errors import choose
from rightsize.packing.choices import Backward, BatchMode, Implementation
from rightsize.packing.data import EVAL_ROWS, DataStream
from rightsize.packing.direct import DirectStep
from rightsize.packing.fused import fuse, structure
from rightsize.packing.members import FusedGroup, LoadedTrial, PlainGroup, per_sample_loss
from rightsize.packing.optimizers import VectorOptimizer
from rightsize.packing.trial import (
    Architectures,
    TrialState,
    build_model,
    host_copy,
    initial_rng_state,
)

PROBE_ROWS = 4  # samples used to record a model's layer order and verify its fusion
#: ``bucket`` mode's price of one more fused group, in rows of one trial's compute:
#: a group's fixed per-step work (~25 operator calls, ~0.2 ms here) over the cost
#: of one sample of MLP-3 (~0.87 MFLOP, ~6 us at ~150 GFLOP/s).
BUCKET_OVERHEAD_ROWS = 40

Clock = Callable[[], float]


@dataclass(frozen=True)
class PackSettings:
    """How a pack is built.

    Attributes:
        fuse: fuse trials of one architecture (False: every trial on the general path).
        batch_mode: ``pad`` (§3.1.1: a fused group computes at its largest batch
            and smaller trials use their slice), ``exact`` (fused groups are
            also split by batch size, so no row is computed in vain) or
            ``bucket`` (fused groups split where padding would cost more than
            one more group; see :func:`batch_buckets`) or ``ragged`` (beyond
            the paper: one fused group computes each trial over exactly its
            own rows, see :mod:`rightsize.packing.ragged`).
        bucket_overhead_rows: ``bucket`` mode's price of one more group.
        mix_activations: also fuse trials whose models differ only in their
            activation functions (an extension: the paper packs them as
            different models, which is what ``False`` does).
        eval_rows: validation samples per forward pass.
        stack_optimizer: update trials of one optimizer spec in a fused group
            as one stacked tensor per parameter (fewer, larger kernel calls;
            bit-identical updates; fused kernels only). False: one unit per trial.
        optimizer_impl: ``fused`` or ``for-loop`` torch.optim kernels (see
            :data:`~rightsize.packing.choices.IMPLEMENTATIONS`).
        backward: how ragged fused groups of MLPs compute gradients
            (:data:`~rightsize.packing.choices.BACKWARDS`); other groups always use autograd.
    """

    fuse: bool = True
    batch_mode: BatchMode = BatchMode.PAD
    mix_activations: bool = False
    bucket_overhead_rows: float = BUCKET_OVERHEAD_ROWS
    eval_rows: int = EVAL_ROWS
    stack_optimizer: bool = True
    optimizer_impl: Implementation = Implementation.FUSED
    backward: Backward = Backward.DIRECT

    def __post_init__(self) -> None:
        # unknown names are refused here, with "did you mean"
        object.__setattr__(self, "batch_mode", choose(BatchMode, self.batch_mode, "batch mode"))
        object.__setattr__(self, "optimizer_impl", choose(
            Implementation, self.optimizer_impl, "optimizer implementation"))  # fmt: skip
        object.__setattr__(self, "backward", choose(Backward, self.backward, "backward"))


@dataclass(frozen=True)
class Switch:
    """One ``free``: which trials left, how long checkpoint + repack took, how many stayed."""

    trial_ids: tuple[str, ...]
    seconds: float
    remaining: int


def load(
    state: TrialState, architectures: Architectures, device: str | torch.device
) -> LoadedTrial:
    """Place a trial on ``device``: its model (fresh from its seed, or its checkpoint) and state."""
    spec = state.spec
    workload = architectures.workload(spec.model_options)
    model = build_model(workload, state, device)
    optimizer_state = {
        name: {key: t.to(device, copy=True) for key, t in tensors.items()}
        for name, tensors in state.optimizer_state.items()
    }
    rng = state.rng_state if state.rng_state is not None else initial_rng_state(spec.seed)
    return LoadedTrial(spec, model, workload.loss_fn, optimizer_state, state.step, rng.clone())


class Pack:
    """Trials trained together: one shared batch, one backward, one vectorized update per step."""

    def __init__(
        self,
        trials: Sequence[LoadedTrial],
        stream: DataStream,
        settings: PackSettings = PackSettings(),
        clock: Clock = time.perf_counter,
    ) -> None:
        steps = {t.step for t in trials}
        if len(steps) != 1:
            raise ValueError(
                f"a pack's trials must be on one step of the stream, got {sorted(steps)}"
            )
        self.stream, self.settings, self._clock = stream, settings, clock
        self.groups = _build_groups(list(trials), stream, settings)
        self.switches: list[Switch] = []
        # Momentum's buffers appear at a trial's first step: restack them after it
        self._restack = self._stack and any(
            t.spec.optimizer.kind == "momentum" and not any(t.optimizer_state.values())
            for t in trials
        )
        self._optimizer = self._make_optimizer()

    @property
    def trial_ids(self) -> list[str]:
        return [t.spec.trial_id for g in self.groups for t in g.trials]

    @property
    def step(self) -> int:
        return self.groups[0].trials[0].step

    @property
    def fused_sizes(self) -> list[int]:
        """Trials per group: fused groups first, then 1 per general-path trial."""
        return [len(g.trials) for g in self.groups]

    @property
    def optimizer_units(self) -> int:
        """Optimizer members: one per trial, or per run of one spec updated stacked."""
        return self._optimizer.units

    def train_step(self, report: bool = False) -> dict[str, float]:
        """One optimizer step of every trial; with ``report``, each trial's training loss."""
        batch = self.stream.batch(self.step, max(g.rows for g in self.groups))
        total, losses = None, []
        for group in self.groups:
            loss, reported = group.loss(batch, report)  # None: the group set its own gradients
            if loss is not None:
                total = loss if total is None else total + loss
            losses += reported
        if total is not None:
            total.backward()
        self._optimizer.step([grads for g in self.groups for grads in g.grads()])
        for group in self.groups:
            group.clear_grads()
            for trial in group.trials:
                trial.step += 1
        if self._restack:
            self._optimizer, self._restack = self._make_optimizer(), False
        if not report:
            return {}
        return dict(zip(self.trial_ids, torch.stack(losses).tolist(), strict=True))

    def evaluate(self, trial_ids: Sequence[str] | None = None) -> dict[str, float]:
        """Mean validation loss of the given trials (default all), computed packed."""
        wanted = set(self.trial_ids if trial_ids is None else trial_ids)
        batches = self.stream.validation(self.settings.eval_rows)
        result = {}
        for group in self.groups:
            ids = [t.spec.trial_id for t in group.trials]
            if wanted.intersection(ids):
                for trial_id, sums in zip(ids, group.validation_sums(batches), strict=True):
                    if trial_id in wanted:
                        result[trial_id] = self.stream.mean_loss(sums)
        return result

    def free(self, trial_id: str) -> TrialState:
        """Checkpoint one trial to the host and repack the rest (§3.1.2)."""
        return self.free_all([trial_id])[0]

    def free_all(self, trial_ids: Sequence[str]) -> list[TrialState]:
        """Checkpoint several trials and repack the rest once; the time is one :class:`Switch`."""
        start = self._clock()
        states, leaving = [], {}
        for trial_id in trial_ids:
            group, index = self._locate(trial_id)
            states.append(_checkpoint(group, index))
            leaving.setdefault(id(group), (group, []))[1].append(index)
        for group, indices in leaving.values():
            if len(indices) < len(group.trials):
                group.remove(indices)  # only fused groups hold more than one trial
            else:
                self.groups.remove(group)
        if self.groups:
            self._optimizer = self._make_optimizer()
        elapsed = self._clock() - start
        self.switches.append(Switch(tuple(trial_ids), elapsed, len(self.trial_ids)))
        return states

    def _locate(self, trial_id: str):
        for group in self.groups:
            for index, trial in enumerate(group.trials):
                if trial.spec.trial_id == trial_id:
                    return group, index
        raise KeyError(f"trial {trial_id!r} is not in this pack")

    def _make_optimizer(self) -> VectorOptimizer:
        members = [m for g in self.groups for m in g.optimizer_members(self._stack)]
        return VectorOptimizer(members, self.settings.optimizer_impl)

    @property
    def _stack(self) -> bool:
        # stacked updates are bit-identical only with the fused kernels (optimizers.stackable)
        return self.settings.stack_optimizer and self.settings.optimizer_impl is Implementation.FUSED


def pack(
    trials: Sequence[LoadedTrial],
    stream: DataStream,
    settings: PackSettings = PackSettings(),
    clock: Clock = time.perf_counter,
) -> Pack:
    """Build one training step for ``trials`` on ``stream`` (§2.2 ``pack``)."""
    return Pack(trials, stream, settings, clock)


def free(packed: Pack, trial_id: str) -> TrialState:
    """Checkpoint ``trial_id`` out of ``packed`` and repack the rest (§2.2 ``free``)."""
    return packed.free(trial_id)


@dataclass
class TrialResult:
    """A trial after training in a pack: its checkpoint, per-step losses, validation loss."""

    state: TrialState
    losses: list[float] = field(default_factory=list)
    val_loss: float | None = None


def train(
    packed: Pack, targets: dict[str, int], validate: bool = True, record_losses: bool = False
) -> dict[str, TrialResult]:
    """Train every trial of ``packed`` to its target step, freeing each as it finishes.

    Trials with different targets (e.g. one epoch at different batch sizes) are
    handled as §3.1.2 describes: the pack trains until the earliest target,
    evaluates and checkpoints the finished trials, and goes on with the rest.
    ``record_losses`` keeps every step's training loss of every trial.
    """
    losses: dict[str, list[float]] = {i: [] for i in packed.trial_ids}
    results: dict[str, TrialResult] = {}
    while packed.trial_ids:
        done = [i for i in packed.trial_ids if packed.step >= targets[i]]
        if done:
            val = packed.evaluate(done) if validate else {}
            for state in packed.free_all(done):
                trial_id = state.spec.trial_id
                results[trial_id] = TrialResult(state, losses[trial_id], val.get(trial_id))
            continue
        for trial_id, loss in packed.train_step(record_losses).items():
            losses[trial_id].append(loss)
    return results


def _checkpoint(group, index: int) -> TrialState:
    trial = group.trials[index]
    return TrialState(
        spec=trial.spec,
        step=trial.step,
        params=host_copy(group.export(index)),
        optimizer_state={name: host_copy(s) for name, s in trial.optimizer_state.items()},
        rng_state=trial.rng_state.clone(),
    )


def _build_groups(trials: list[LoadedTrial], stream: DataStream, settings: PackSettings) -> list:
    by_key: dict[tuple, list[LoadedTrial]] = {}
    for trial in trials:
        rows = trial.spec.batch_size if settings.batch_mode is BatchMode.EXACT else None
        if settings.mix_activations:
            architecture = structure(trial.model, ignore_activations=True)
        else:
            architecture = trial.spec.architecture
        by_key.setdefault((architecture, rows), []).append(trial)
    probe = stream.batch(trials[0].step, min(PROBE_ROWS, stream.width))
    groups: list = []
    for members in by_key.values():
        for part in _split(members, settings):
            # one trial alone gains nothing from the stacked layers: its own model is as fast
            fusable = settings.fuse and len(part) > 1
            fused = _try_fuse(part, probe, settings) if fusable else None
            groups.extend([fused] if fused else [PlainGroup(t) for t in part])
    return groups


def _split(members: list[LoadedTrial], settings: PackSettings) -> list[list[LoadedTrial]]:
    if settings.batch_mode is not BatchMode.BUCKET:
        return [members]
    members = sorted(members, key=lambda t: -t.spec.batch_size)
    sizes = [t.spec.batch_size for t in members]
    return [members[lo:hi] for lo, hi in batch_buckets(sizes, settings.bucket_overhead_rows)]


def batch_buckets(sizes: list[int], overhead_rows: float) -> list[tuple[int, int]]:
    """Split batch sizes (largest first) into runs that minimise padded rows plus groups.

    A run ``[lo, hi)`` computed as one fused group costs ``overhead_rows`` plus
    ``(hi - lo) * sizes[lo]`` rows (every trial padded to the run's largest
    batch); dynamic programming over the split points finds the cheapest runs.
    """
    best = [0.0] + [float("inf")] * len(sizes)  # best[i]: cheapest cost of sizes[:i]
    start = [0] * (len(sizes) + 1)
    for hi in range(1, len(sizes) + 1):
        for lo in range(hi):
            cost = best[lo] + overhead_rows + (hi - lo) * sizes[lo]
            if cost < best[hi]:
                best[hi], start[hi] = cost, lo
    runs, hi = [], len(sizes)
    while hi > 0:
        runs.append((start[hi], hi))
        hi = start[hi]
    return runs[::-1]


def _try_fuse(members: list[LoadedTrial], probe, settings: PackSettings) -> FusedGroup | None:
    rows_loss = per_sample_loss(members[0].loss_fn)
    inputs, target = probe
    if rows_loss is None or len(inputs) != 1 or target.dim() != 1:
        return None
    ragged = settings.batch_mode is BatchMode.RAGGED

    def order(t: LoadedTrial) -> tuple:
        # padded: batch sizes largest first; then equal activations and equal
        # optimizers next to each other (fewer activation runs and optimizer calls)
        spec = t.spec
        optimizer = (spec.optimizer.kind, spec.optimizer.lr, repr(spec.optimizer))
        batch = () if ragged else (-spec.batch_size,)
        return (*batch, spec.model_options, optimizer, -spec.batch_size)

    members = sorted(members, key=order)
    model = fuse([m.model for m in members], inputs[0], settings.mix_activations, ragged)
    if model is None:
        return None
    for member in members:
        member.model = None  # the fused model's stacked tensors now hold its weights
    direct = None
    if ragged and settings.backward is Backward.DIRECT:  # rows_loss: a classification loss
        direct = DirectStep.compile(model, len(members), inputs[0])
    return FusedGroup(members, model, rows_loss, ragged, direct)
