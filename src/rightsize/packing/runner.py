"""A tuning run end to end: space -> Hyperband rungs -> pack_opt -> packed training -> report.

:class:`TuneSettings` is what a user chooses; :func:`prepare_search` checks all
of it before any training (the space against the workload's options, eta and
R, whether a trial fits the device even alone) and wires the pieces:
the shared data stream, the memory model, pack_opt as Hyperband's planner and
the rung executor as its trainer. :func:`run_search` runs it and
:func:`search_report` turns the result into plain data for the CLI and the
benchmarks.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any

import numpy as np
import torch

from rightsize.core.errors import SpecError, choose, unknown_name
from rightsize.packing.allocator import AllocatorMode, retain_freed_memory
from rightsize.packing.choices import STEPS_PER_UNIT, Algorithm, BatchMode, PackStrategy
from rightsize.packing.data import DataStream
from rightsize.packing.executor import RungExecutor
from rightsize.packing.hyperband import (
    Bracket,
    Hyperband,
    RungObserver,
    Sampler,
    SearchResult,
    sampled,
    search_schedule,
)
from rightsize.packing.memory import (
    Footprint,
    PackMemory,
    footprint_from_profile,
    measure_footprint,
)
from rightsize.packing.optimizers import OptimizerSpec
from rightsize.packing.pack import PackSettings
from rightsize.packing.packopt import PackOptSettings, balance, pack_opt, row_work
from rightsize.packing.pool import WorkerPool
from rightsize.packing.probe import PackGate, ProbeSettings
from rightsize.packing.space import SearchSpace
from rightsize.packing.trial import (
    Architectures,
    ModelOptions,
    TrialSpec,
    spec_from_config,
    trial_seed,
)
from rightsize.profiling.device import describe_device, resolve_device
from rightsize.profiling.profile import Profile
from rightsize.workloads.registry import WorkloadRegistry

DATA_SEED = 0  # synthetic datasets are drawn once; the search seed orders the stream
_PLAN_STREAM = 1  # keeps pack_opt's random numbers apart from sampling's

#: How ``--pack none`` trains a trial: plain PyTorch with torch.optim's fused
#: optimizer (bit-identical math to a pack's, the default), with torch.optim's
#: default for-loop implementation (what most code uses; same math, different
#: rounding), or as a pack of one.
class UnpackedEngine(StrEnum):
    TORCH_FUSED = "torch-fused"
    TORCH_FOR_LOOP = "torch-for-loop"
    PACK = "pack"


ENGINES: tuple[str, ...] = tuple(UnpackedEngine)


@dataclass(frozen=True)
class TuneSettings:
    """What to tune and how.

    Attributes:
        workload, dataset: the zoo model (or factory) and its data.
        fixed_options: model options set for every trial (not searched).
        max_resource, eta: Hyperband's R and eta.
        algorithm: ``hyperband`` (Algorithm 1's brackets) or ``successive-halving``
            (its most aggressive bracket alone; see :mod:`rightsize.packing.hyperband`).
        configurations: successive halving's trials (default: as many as Hyperband
            samples); Hyperband's brackets fix their own.
        seed: orders the data and draws configurations, trial seeds and centroids.
        steps_per_unit: training steps per unit of resource.
        resume: promoted trials continue from their checkpoint.
        concurrent_brackets: run Hyperband's brackets side by side, packing
            across them (see :class:`~rightsize.packing.hyperband.Hyperband`).
        device: ``cpu`` or ``cuda``.
        memory_limit_bytes: capacity a pack must fit (default: the device's memory).
        profile_path: a saved profile to take trial footprints from (default: measured).
        packopt, pack: pack_opt's and the pack's settings.
        probe: the pack gate's: time each proposed pack against its trials alone
            and split it when it is slower (see :mod:`rightsize.packing.probe`);
            trials left alone then train with plain PyTorch.
        unpacked_engine: how ``--pack none`` trains a trial (see :data:`ENGINES`).
        workers: processes training groups side by side, one torch thread each
            (each pack then gets ``1/workers`` of the memory limit).
        worker_allocator: the workers' allocator mode (``retain`` or ``default``).
        dataset_size: nominal size of a synthetic dataset.
    """

    workload: str = "mlp3"
    dataset: str | None = None
    fixed_options: ModelOptions = ()
    max_resource: float = 81
    eta: float = 3
    algorithm: Algorithm = Algorithm.HYPERBAND
    configurations: int | None = None
    seed: int = 0
    steps_per_unit: int = STEPS_PER_UNIT
    resume: bool = True
    concurrent_brackets: bool = False
    device: str = "cpu"
    memory_limit_bytes: int | None = None
    profile_path: str | None = None
    packopt: PackOptSettings = field(default_factory=PackOptSettings)
    pack: PackSettings = field(default_factory=PackSettings)
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    unpacked_engine: UnpackedEngine = UnpackedEngine.TORCH_FUSED
    workers: int = 1
    worker_allocator: AllocatorMode = AllocatorMode.RETAIN
    dataset_size: int | None = None

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise SpecError(f"workers must be >= 1, got {self.workers}")
        if self.steps_per_unit < 1:
            raise SpecError(f"steps per unit must be >= 1, got {self.steps_per_unit}")
        for name, choices, kind in (("algorithm", Algorithm, "algorithm"),
                                    ("unpacked_engine", UnpackedEngine, "unpacked engine"),
                                    ("worker_allocator", AllocatorMode, "worker allocator")):
            object.__setattr__(self, name, choose(choices, getattr(self, name), kind))

    def schedule(self) -> list[Bracket]:
        """The brackets the search runs (raises SpecError for a bad eta, R or count)."""
        return search_schedule(self.algorithm, self.max_resource, self.eta, self.configurations)


@dataclass(frozen=True)
class Search:
    """A prepared search: its pieces, ready to run; ``trials`` fills as Hyperband samples."""

    settings: TuneSettings
    space: SearchSpace
    architectures: Architectures
    memory: PackMemory
    executor: RungExecutor
    hyperband: Hyperband
    trials: dict[str, TrialSpec] = field(default_factory=dict)
    gate: PackGate | None = None


def prepare_search(
    settings: TuneSettings,
    space: SearchSpace,
    registry: WorkloadRegistry,
    progress: Callable[[str], None] = lambda _line: None,
    clock: Callable[[], float] = time.perf_counter,
    sample: Sampler | None = None,
    observe: RungObserver = lambda _record, _promoted: None,
) -> Search:
    """Validate everything and build the search (no training yet).

    Args:
        sample: draws a bracket's trials (default: uniformly from ``space``, seeded);
            the Optuna driver passes ``study.ask`` here.
        observe: told of every ranked rung (see :class:`Hyperband`).

    Raises:
        RightsizeError: bad eta or R, unknown workload, dataset or option value,
            or a trial that does not fit the device even alone.
    """
    schedule = settings.schedule()  # eta, R and the algorithm first: cheapest to check
    device = resolve_device(settings.device)
    architectures = search_architectures(settings, registry)
    _check_option_values(space, architectures)
    width = max(space.values("batch_size"))
    memory = _memory(settings, architectures, device)
    memory.check_alone(_largest_trials(space))
    pool = None
    if settings.workers > 1:
        # this process trains too: workers - 1 more processes
        pool = WorkerPool(settings.workers - 1, partial(worker_trainer, settings, width))
    executor = search_executor(settings, architectures, width, clock, pool)
    gate = _gate(settings, architectures, executor, space, progress)
    trials: dict[str, TrialSpec] = {}
    hyperband = Hyperband(
        settings.max_resource, settings.eta,
        _recorded(sample or seeded_sampler(settings, space), trials),
        _planner(settings, space, memory, gate), executor, resume=settings.resume, clock=clock,
        progress=progress, concurrent=settings.concurrent_brackets, observe=observe,
        schedule=schedule,
    )  # fmt: skip
    return Search(settings, space, architectures, memory, executor, hyperband, trials, gate)


def _gate(settings, architectures, executor: RungExecutor, space, progress) -> PackGate | None:
    if settings.packopt.strategy is PackStrategy.NONE or not settings.probe.enabled:
        return None
    batches = space.values("batch_size")
    return PackGate(
        architectures, executor.stream, torch.device(executor.device), settings.pack,
        fused_optimizer=executor.alone == "fused", batch_range=(min(batches), max(batches)),
        settings=settings.probe, progress=progress,
    )  # fmt: skip


def search_architectures(settings: TuneSettings, registry: WorkloadRegistry) -> Architectures:
    """The search's models and data: the workload with its fixed options and each trial's."""
    return Architectures(
        lambda options: registry.get(
            settings.workload, settings.dataset, {**dict(settings.fixed_options), **options},
            settings.dataset_size, DATA_SEED,
        )
    )  # fmt: skip


def search_executor(settings, architectures, width: int, clock, pool=None) -> RungExecutor:
    """The rung executor over the search's stream (``width`` rows a step: the largest batch)."""
    device = resolve_device(settings.device)
    stream = DataStream(architectures.workload(()).dataset, width, settings.seed, device)
    return RungExecutor(
        architectures, stream, settings.steps_per_unit, device, settings.pack,
        alone=_alone_engine(settings), clock=clock, pool=pool,
    )  # fmt: skip


def worker_trainer(settings: TuneSettings, width: int) -> RungExecutor:
    """A worker process's trainer: one torch thread, the same stream and models as the parent."""
    torch.set_num_threads(1)
    if settings.worker_allocator is AllocatorMode.RETAIN:
        retain_freed_memory()
    architectures = search_architectures(settings, WorkloadRegistry())
    return search_executor(settings, architectures, width, time.perf_counter)


def _alone_engine(settings: TuneSettings) -> str | None:
    """How the executor trains groups of one: a torch.optim implementation, or None (packed).

    Packing with the gate: the trials it leaves alone train with the pack's kernels in
    plain PyTorch, which is what the gate timed them as.
    """
    if settings.packopt.strategy is not PackStrategy.NONE:
        return settings.pack.optimizer_impl if settings.probe.enabled else None
    if settings.unpacked_engine is UnpackedEngine.PACK:
        return None
    return settings.unpacked_engine.removeprefix("torch-")


def model_option_names(registry: WorkloadRegistry, workload: str) -> list[str] | None:
    """The options a zoo model accepts; None for a user's factory (checked when it is called)."""
    if ":" in workload:
        return None
    for entry in registry.models():
        if entry.name == workload:
            return entry.option_names()
    raise unknown_name("workload", workload, [m.name for m in registry.models()])


def run_search(search: Search, brackets: Collection[int] | None = None) -> SearchResult:
    """Run the prepared search (on this thread, or its worker processes), then stop the workers.

    Args:
        brackets: run only the brackets with these ``s`` (default all).
    """
    try:
        return search.hyperband.run(brackets)
    finally:
        search.executor.close()


def trial_id(s: int, k: int) -> str:
    """The id of bracket ``s``'s ``k``-th sampled trial (ties in a rung go by it)."""
    return f"s{s}-{k:03d}"


def seeded_sampler(settings: TuneSettings, space: SearchSpace) -> Sampler:
    """rightsize's own draw: bracket ``s``'s trials uniformly from ``space``, from the search
    seed and ``s`` alone (so a bracket draws the same trials whatever ran before it)."""

    def sample(s: int, count: int) -> list[TrialSpec]:
        rng = np.random.default_rng([settings.seed, s])
        return [
            spec_from_config(config, trial_id(s, k), trial_seed(settings.seed, s, k))
            for k, config in enumerate(space.sample(count, rng))
        ]

    return sample


def _recorded(sample: Sampler, trials: dict[str, TrialSpec]) -> Sampler:
    """``sample``, keeping every trial it draws in ``trials`` (for the report)."""

    def recorded(s: int, count: int) -> list[TrialSpec]:
        specs = sample(s, count)
        trials.update((spec.trial_id, spec) for spec in specs)
        return specs

    return recorded


def _planner(settings: TuneSettings, space: SearchSpace, memory: PackMemory, gate: PackGate | None):
    def plan(trials: list[TrialSpec], s: int, i: int) -> list[list[TrialSpec]]:
        rng = np.random.default_rng([settings.seed, s, i, _PLAN_STREAM])
        groups = pack_opt(trials, settings.packopt, memory.fits, rng, space)
        if settings.workers > 1:
            groups = balance(groups, settings.workers, memory.fits, work=row_work(trials))
        # the gate has the last word: it times the packs that will train
        return gate.admit(groups) if gate else groups

    return plan


def _check_option_values(space: SearchSpace, architectures: Architectures) -> None:
    for name in space.model_options():
        for value in space.values(name):
            try:
                architectures.workload(((name, value),)).make_model()
            except (ValueError, TypeError) as exc:
                raise SpecError(
                    f"space: {name} value {value!r} does not build the model: {exc}"
                ) from None


def _memory(
    settings: TuneSettings, architectures: Architectures, device: torch.device
) -> PackMemory:
    # packs train side by side on the workers: each gets its share of the device
    total = settings.memory_limit_bytes or describe_device(device).memory_bytes
    capacity = total // settings.workers
    profile = Profile.load(settings.profile_path) if settings.profile_path else None
    cache: dict[ModelOptions, Footprint] = {}

    def footprint(options: ModelOptions) -> Footprint:
        if options not in cache:
            measured = measure_footprint(architectures.workload(options), device)
            cache[options] = (
                footprint_from_profile(profile, measured.input_bytes_per_sample)
                if profile
                else measured
            )
        return cache[options]

    # a bucket pads at most as much as pad mode; exact and ragged compute a trial at its own batch
    pad = settings.pack.batch_mode in (BatchMode.PAD, BatchMode.BUCKET)
    return PackMemory(footprint, capacity, pad, settings.pack.mix_activations)


def _largest_trials(space: SearchSpace) -> list[TrialSpec]:
    """For each architecture and optimizer, the trial at the largest batch: the biggest alone."""
    options = [[(n, v) for v in space.values(n)] for n in space.model_options()]
    largest = max(space.values("batch_size"))
    return [
        TrialSpec("largest", largest, OptimizerSpec(kind, 1.0), tuple(sorted(combo)))
        for combo in itertools.product(*options)
        for kind in space.values("optimizer")
    ]


def search_report(search: Search, result: SearchResult) -> dict[str, Any]:
    """Plain data: the best configuration, wall time, and every rung's packs and losses."""
    settings = search.settings
    best = result.best
    return {
        "workload": settings.workload,
        "dataset": search.architectures.workload(()).dataset.name,
        "strategy": settings.packopt.strategy,
        "seed": settings.seed,
        "max_resource": settings.max_resource,
        "eta": settings.eta,
        "algorithm": settings.algorithm,
        "configurations": sampled(search.hyperband.schedule),
        "steps_per_unit": settings.steps_per_unit,
        "resume": settings.resume,
        "concurrent_brackets": settings.concurrent_brackets,
        "workers": settings.workers,
        "batch_mode": settings.pack.batch_mode,
        "backward": settings.pack.backward,
        "space_size": search.space.size,
        "memory_capacity_bytes": search.memory.capacity_bytes,
        "best": {
            "trial_id": best.trial_id,
            "config": best.config.as_dict() if best.config else {},
            "val_loss": result.best_loss,
            "resource": result.best_resource,
        },
        "wall_s": result.wall_s,
        "pack_gate": _gate_report(search.gate),
        "trial_steps": search.executor.trial_steps,
        "trials": {i: s.config.as_dict() for i, s in search.trials.items() if s.config},
        "rungs": [
            {
                "bracket": r.bracket, "rung": r.rung, "n": r.n, "r": r.r,
                "steps": search.executor.steps(r.r), "wall_s": r.wall_s, "switch_s": r.switch_s,
                "packs": r.groups, "losses": r.losses,
            }
            for r in result.rungs
        ],
    }  # fmt: skip


def _gate_report(gate: PackGate | None) -> dict[str, Any] | None:
    """What the pack gate measured and decided (None: packs were not measured)."""
    if gate is None:
        return None
    return {
        "seconds": gate.seconds,
        "min_gain": gate.settings.min_gain,
        "probes": [probe.as_dict() for probe in gate.probes],
    }
