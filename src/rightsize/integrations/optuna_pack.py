"""Several trials of a user's own Optuna loop trained as one pack: a batched ask (issue 41).

Optuna's users have long asked to evaluate several trials at once
(optuna#2660, #2568, #2626). :func:`train_packed` is that, inside the user's
own loop and with the study's own sampler and pruner::

    trials = [study.ask(distributions) for _ in range(8)]
    for result in train_packed(study, trials, "mlp3", settings):
        result.tell(study)

- each trial's parameters (``batch_size``, ``optimizer``, ``lr`` and model
  options, however they were drawn) become a rightsize trial, its weights
  seeded from the search seed and the trial's number (a resumed study gives a
  re-asked number the same seed);
- the trials train together as one pack (packing paper §3) to each resource
  in ``report_at`` in turn; after each, every trial's validation loss is
  reported (``trial.report(loss, step=units)``) and ``trial.should_prune()``
  asks the study's pruner; a pruned trial leaves the pack, the others resume
  from their checkpoints;
- a trial's losses are those it gets trained alone with ``torch.optim``'s
  fused kernels, bit for bit (docs/tuning.md, the isolation guarantee).

Nothing is told unless ``tell=True``: the results carry what ``study.tell``
needs. A process that dies mid-pack leaves its trials ``RUNNING``;
:func:`fail_interrupted_packs` marks them ``FAIL`` before the loop goes on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial
from optuna.trial import TrialState as OptunaState

from rightsize.core.errors import ResourceError, SpecError
from rightsize.core.units import format_bytes
from rightsize.packing.runner import TuneSettings, model_option_names, prepare_search
from rightsize.packing.trial import TrialSpec, TrialState, spec_from_config, trial_seed
from rightsize.workloads.registry import WorkloadRegistry

if TYPE_CHECKING:
    from rightsize.integrations.optuna import OptunaSpace

#: Trial attribute set before training: ``{"seed": the weights' seed}`` (marks the trial
#: as one :func:`train_packed` trains, for :func:`fail_interrupted_packs`).
PACKED_ATTR = "rightsize:packed"


@dataclass(frozen=True)
class PackedTrial:
    """One trial's outcome.

    Attributes:
        trial: the trial as asked.
        state: ``COMPLETE`` (trained to the last resource), ``PRUNED`` (the pruner
            stopped it) or ``FAIL`` (its loss diverged).
        value: the final loss (complete), the last reported one (pruned), None (failed).
        losses: each reported validation loss by resource units trained.
    """

    trial: optuna.Trial
    state: OptunaState
    value: float | None
    losses: dict[int, float] = field(default_factory=dict)

    def tell(self, study: optuna.Study) -> FrozenTrial:
        """Tell the study this outcome (what ``train_packed(tell=True)`` does)."""
        if self.state == OptunaState.COMPLETE:
            return study.tell(self.trial, self.value)
        return study.tell(self.trial, state=self.state)


def train_packed(
    study: optuna.Study,
    trials: Sequence[optuna.Trial],
    workload: str,
    settings: TuneSettings | None = None,
    *,
    report_at: Sequence[int] | None = None,
    tell: bool = False,
    registry: WorkloadRegistry | None = None,
    progress: Callable[[str], None] = lambda _line: None,
) -> list[PackedTrial]:
    """Train ``trials`` (asked of ``study``, not yet told) as one pack, reporting and pruning.

    Args:
        study: minimizes the validation loss; its pruner decides after each report.
        trials: from ``study.ask()`` (with distributions, or ``trial.suggest_*`` calls made
            before this one); each has ``batch_size``, ``optimizer`` and ``lr`` and may
            have the workload's model options.
        workload: a zoo name (``mlp3``) or a factory ``package.module:function``.
        settings: dataset, seed, steps per unit, device, memory limit and the pack's
            settings, as for ``rightsize tune`` (its workload is replaced; one pack in
            this process, so ``workers`` is ignored).
        report_at: resource units after which each trial's loss is reported, ascending
            (default: Hyperband's rung ends for the settings' R and eta, e.g. 1, 3, 9, 27,
            81, the steps HyperbandPruner checks).
        tell: tell the study each outcome, too.
        progress: one line per report.

    Returns:
        One result per trial, in the order given.

    Raises:
        SpecError: a maximizing or multi-objective study, a trial given twice, a
            parameter the space rules refuse, or bad ``report_at``.
        ResourceError: the pack does not fit the memory limit (ask fewer trials at once).
    """
    check_minimizing(study)
    settings = replace(settings or TuneSettings(), workload=workload, workers=1)
    registry = registry or WorkloadRegistry()
    points = _report_points(settings, report_at)
    _check_asked(trials)
    # here, not at the top: rightsize.integrations.optuna re-exports this module
    from rightsize.integrations.optuna import optuna_space

    space = optuna_space(_distributions(trials), model_option_names(registry, workload))
    search = prepare_search(settings, space.packing, registry, progress)
    specs = [_spec(trial, space, settings.seed) for trial in trials]
    _check_fits(search.memory, specs)
    for trial, spec in zip(trials, specs, strict=True):
        trial.set_user_attr(PACKED_ATTR, {"seed": spec.seed})
    outcomes: dict[str, PackedTrial] = {}
    losses: dict[str, dict[int, float]] = {spec.trial_id: {} for spec in specs}
    by_id = {spec.trial_id: trial for spec, trial in zip(specs, trials, strict=True)}
    states = [TrialState(spec) for spec in specs]
    try:
        for units in points:
            ids = [s.spec.trial_id for s in states]
            trained, rung_losses, _ = search.executor.train(states, [ids], units)
            for tid in ids:
                loss = rung_losses[tid]
                by_id[tid].report(loss, units)
                losses[tid][units] = loss
                if not math.isfinite(loss):
                    outcomes[tid] = PackedTrial(by_id[tid], OptunaState.FAIL, None, losses[tid])
                elif units == points[-1]:
                    outcomes[tid] = PackedTrial(
                        by_id[tid], OptunaState.COMPLETE, loss, losses[tid]
                    )
                elif by_id[tid].should_prune():
                    outcomes[tid] = PackedTrial(by_id[tid], OptunaState.PRUNED, loss, losses[tid])
            states = [trained[tid] for tid in ids if tid not in outcomes]
            progress(
                f"r={units}: {len(ids)} trials in one pack; {len(states)} go on "
                f"({sum(o.state == OptunaState.PRUNED for o in outcomes.values())} pruned so far)"
            )
            if not states:
                break
    finally:
        search.executor.close()
    results = [outcomes[spec.trial_id] for spec in specs]
    if tell:
        for result in results:
            result.tell(study)
    return results


def tell_final(study: optuna.Study, trial: optuna.Trial, loss: float) -> None:
    """Tell the study a trial's loss at R: ``COMPLETE`` with it, or ``FAIL`` if it diverged."""
    if math.isfinite(loss):
        study.tell(trial, loss)
    else:
        study.tell(trial, state=OptunaState.FAIL)


def check_minimizing(study: optuna.Study) -> None:
    """Raise SpecError unless ``study`` minimizes one value (rightsize's validation loss)."""
    if len(study.directions) != 1 or study.direction != optuna.study.StudyDirection.MINIMIZE:
        directions = ", ".join(d.name.lower() for d in study.directions)
        raise SpecError(
            f"study {study.study_name!r} has direction(s) {directions}; rightsize minimizes "
            "one value, the validation loss: create the study with direction='minimize'"
        )


def fail_interrupted_packs(study: optuna.Study) -> list[int]:
    """Tell ``FAIL`` for the trials a :func:`train_packed` left running (its process died).

    Run it where no other process is training this study's packs (it cannot tell a
    dead pack from a live one). Returns the numbers of the trials it failed.
    """
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(OptunaState.RUNNING,)):
        if PACKED_ATTR in trial.user_attrs:
            study.tell(trial.number, state=OptunaState.FAIL)
            failed.append(trial.number)
    return failed


def _report_points(settings: TuneSettings, report_at: Sequence[int] | None) -> list[int]:
    if report_at is None:
        rungs = [rung.r for rung in settings.schedule()[0].rungs]
        if not all(float(r).is_integer() for r in rungs):
            raise SpecError(
                f"R={settings.max_resource:g} and eta={settings.eta:g} give rungs at "
                f"{', '.join(f'{r:g}' for r in rungs)} units, but Optuna's report steps are whole "
                "numbers: choose R a power of eta, or give report_at"
            )
        return [int(r) for r in rungs]
    points = list(report_at)
    whole = all(isinstance(p, int) and not isinstance(p, bool) for p in points)
    if not points or not whole or points[0] < 1 or points != sorted(set(points)):
        raise SpecError(
            f"report_at: expected ascending whole numbers of resource units >= 1, got {points!r}"
        )
    return points


def _check_asked(trials: Sequence[optuna.Trial]) -> None:
    if not trials:
        raise SpecError("train_packed: no trials; ask at least one with study.ask()")
    for trial in trials:
        if not isinstance(trial, optuna.Trial):
            raise SpecError(
                f"train_packed: expected trials from study.ask(), got {type(trial).__name__}"
            )
    numbers = [t.number for t in trials]
    if len(set(numbers)) != len(numbers):
        raise SpecError(f"train_packed: a trial is given twice (numbers {numbers})")


def _distributions(trials: Sequence[optuna.Trial]) -> dict[str, BaseDistribution]:
    """What the trials were asked from, one distribution per name.

    The pack's space comes from the distributions, not from the values drawn: the
    widest batch of the space sets the data stream's width, and so which rows each
    step gives every trial; from the drawn values a trial's data would depend on
    who it is packed with.
    """
    out: dict[str, BaseDistribution] = {}
    for trial in trials:
        for name, dist in trial.distributions.items():
            if out.setdefault(name, dist) != dist:
                raise SpecError(
                    f"trial parameters: {name} was drawn from {out[name]} by one trial and "
                    f"from {dist} by trial {trial.number}: ask a pack's trials with the same "
                    "distributions"
                )
    return out


def _spec(trial: optuna.Trial, space: OptunaSpace, seed: int) -> TrialSpec:
    if set(trial.params) != set(space.distributions):
        missing = sorted(set(space.distributions) - set(trial.params))
        raise SpecError(f"trial {trial.number} has no value for {', '.join(missing)}")
    config = space.config(trial.params)
    return spec_from_config(config, f"t{trial.number:05d}", trial_seed(seed, trial.number))


def _check_fits(memory, specs: list[TrialSpec]) -> None:
    need = memory.needed_bytes(specs)
    if need > memory.capacity_bytes:
        raise ResourceError(
            f"{len(specs)} trials packed need {format_bytes(need)} but the limit is "
            f"{format_bytes(memory.capacity_bytes)}: ask fewer trials at once or raise the "
            "memory limit"
        )
