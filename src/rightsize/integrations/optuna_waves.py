"""Asynchronous successive halving in packed waves, the study's sampler told after every rung
(issue 41; ASHA, Li et al. 2020, in its stopping form; packing paper §3 for the packs).

The Hyperband driver (:mod:`rightsize.integrations.optuna`) asks a whole
bracket before anything trains, so a model-based sampler (TPE) learns nothing
inside a bracket. Here the study is asked ``wave`` trials at a time, as many
as train well side by side; the wave trains in pack_opt's groups (the search's
own planner, over its worker processes) to each rung ``r_i = min_units *
eta**i`` up to R, and after every rung:

- every wave trial's loss is reported (``trial.report(loss, step=r_i)``), so
  the sampler and the study see the rung's results at once;
- the promotion rule of asynchronous successive halving decides who goes on
  (:func:`promoted`): a trial continues if its loss is among the best
  ``floor(n_i / eta)`` of all ``n_i`` losses seen at rung ``i`` so far, this
  wave's and every earlier wave's (the rule of Optuna's SuccessiveHalvingPruner
  and Ray's ASHAScheduler, with the whole wave ranked together instead of one
  trial at a time); the others are told ``PRUNED``;
- trials that reach R are told ``COMPLETE`` (``FAIL`` for a diverged loss).

A new wave is asked at every rung step (``overlap``, the default): the waves
in flight train side by side in one call of the executor, each to its own
rung (wave w to rung 0, w-1 to rung 1, ...; successive halving's rungs cost
about the same, so both workers stay busy), and each wave is asked from a
sampler that has seen every rung finished so far. Without ``overlap`` the next
wave waits for the last one to finish. Until ``configurations`` trials were asked. A trial's weights are seeded from
the search seed and its trial number (as :func:`~rightsize.integrations.
optuna_pack.train_packed` and tune_peers' Optuna trials), and its losses are
those it gets trained alone: packing changes no trial's result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState as OptunaState

from rightsize.core.errors import SpecError
from rightsize.integrations.optuna_pack import check_minimizing, tell_final
from rightsize.packing.hyperband import RungRecord, SearchResult, sampled
from rightsize.packing.runner import Search, TuneSettings, model_option_names, prepare_search
from rightsize.packing.space import SearchSpace
from rightsize.packing.trial import TrialState, spec_from_config, trial_seed
from rightsize.workloads.registry import WorkloadRegistry

#: Trial attribute: ``{"wave": w, "trial_id": "t00012", "seed": its weights' seed}``.
WAVE_ATTR = "rightsize:wave"


@dataclass(frozen=True)
class WaveSettings:
    """The waves' shape.

    Attributes:
        wave: trials asked at once and trained together (split into packs by memory
            and across the workers).
        configurations: trials asked in all (default: as many as the settings'
            Hyperband samples, 143 for R = 81, eta = 3).
        min_units: the first rung's resource (ASHA's r); rungs at ``min_units * eta**i``
            up to R, and R.
        overlap: ask a new wave at every rung step, so that the waves in flight train
            their rungs side by side (wave w at rung 0, w-1 at rung 1, ...: successive
            halving's rungs cost about the same, so the workers stay busy); False: the
            next wave is asked once the last one has finished (the sampler then knows
            every rung of every earlier wave, and a wave's last rungs leave workers idle).
    """

    wave: int = 27
    configurations: int | None = None
    min_units: int = 1
    overlap: bool = True

    def __post_init__(self) -> None:
        if self.wave < 1:
            raise SpecError(f"wave: expected at least 1 trial, got {self.wave}")
        if self.configurations is not None and self.configurations < 1:
            raise SpecError(f"configurations: expected at least 1, got {self.configurations}")
        if self.min_units < 1:
            raise SpecError(f"min_units: expected at least 1 unit, got {self.min_units}")


def rung_units(max_resource: float, eta: float, min_units: int) -> list[int]:
    """Rung ends in whole units: ``min_units * eta**i`` below R, then R (1, 3, 9, 27, 81)."""
    if not float(max_resource).is_integer() or not float(eta).is_integer() or eta < 2:
        raise SpecError(
            f"packed waves need whole R and eta >= 2 (Optuna's report steps are whole), "
            f"got R={max_resource:g}, eta={eta:g}"
        )
    if min_units > max_resource:
        raise SpecError(f"min_units={min_units} is above R={max_resource:g}")
    points, r = [], min_units
    while r < max_resource:
        points.append(int(r))
        r *= int(eta)
    return points + [int(max_resource)]


def promoted(
    wave_losses: Mapping[str, float], rung_history: Sequence[float], eta: float
) -> list[str]:
    """ASHA's rule for one wave at one rung: the wave's trials whose loss is among the best
    ``floor(n / eta)`` of the ``n`` losses seen at this rung (``rung_history``: earlier
    waves' and this wave's). Ties go to the earlier trial (the wave's order, then earlier
    waves); a diverged (NaN) loss never goes on."""
    keep = int(math.floor(len(rung_history) / eta + 1e-9))
    before = len(rung_history) - len(wave_losses)  # the wave's losses come last, in order
    best = sorted(range(len(rung_history)), key=lambda k: (_rank(rung_history[k]), k))[:keep]
    ids = list(wave_losses)
    return [ids[k - before] for k in sorted(best) if k >= before and math.isfinite(rung_history[k])]


@dataclass(frozen=True)
class WaveSearch:
    """A waves run: the prepared search (its executor counts trial-steps), the result
    (best: the study's best trial trained to R, else the smallest loss at the highest
    rung reached) and the trials asked."""

    search: Search
    result: SearchResult
    asked: int


def optimize_waves(
    study: optuna.Study,
    space: Mapping | SearchSpace | str | Path,
    settings: TuneSettings | None = None,
    waves: WaveSettings | None = None,
    registry: WorkloadRegistry | None = None,
    progress: Callable[[str], None] = lambda _line: None,
) -> WaveSearch:
    """Asynchronous successive halving on ``study`` in packed waves (see the module).

    Args:
        study: minimizes the validation loss; its sampler proposes every wave (a
            model-based one learns from all rungs reported before the wave is asked).
        space: Optuna distributions, a rightsize space, or the path of a space YAML.
        settings: R, eta, workload, packing and workers, as for ``rightsize tune``
            (its algorithm and brackets are not used).
        waves: wave size, trials in all, the first rung's resource.

    Raises:
        SpecError: a maximizing study, a space the rules refuse, R or eta not whole.
    """
    from rightsize.integrations.optuna import optuna_space  # it re-exports this module

    settings = settings or TuneSettings()
    waves = waves or WaveSettings()
    registry = registry or WorkloadRegistry()
    resolved = optuna_space(space, model_option_names(registry, settings.workload))
    check_minimizing(study)
    points = rung_units(settings.max_resource, settings.eta, waves.min_units)
    total = waves.configurations or sampled(settings.schedule())
    search = prepare_search(settings, resolved.packing, registry, progress)
    start = time.perf_counter()
    run = _WaveRun(study, resolved, search, points, settings, progress)
    active: list[_Wave] = []
    try:
        while run.asked < total or active:
            if run.asked < total and (waves.overlap or not active):
                active.append(run.ask(min(waves.wave, total - run.asked)))
            active = run.step(active)
    finally:
        search.executor.close()
    return WaveSearch(search, run.result(time.perf_counter() - start), total)


@dataclass
class _Wave:
    """One wave in flight: its trials (by rightsize id), those still training, their rung."""

    w: int
    trials: dict[str, optuna.Trial]
    states: list[TrialState]
    rung: int = 0


class _WaveRun:
    """The waves' mechanism: asks, trains, reports and tells; keeps each rung's losses so
    far (the promotion rule's ``n_i``) and every rung's record."""

    def __init__(self, study, space, search: Search, points: list[int], settings, progress):
        self.study, self.space, self.search, self.points = study, space, search, points
        self.seed, self.eta, self.progress = settings.seed, settings.eta, progress
        self.history: list[list[float]] = [[] for _ in points]
        self.records: list[RungRecord] = []
        self.asked = 0
        self._waves = 0

    def ask(self, count: int) -> _Wave:
        """The next wave: ``count`` trials asked of the study, seeded by their numbers."""
        w, self._waves, self.asked = self._waves, self._waves + 1, self.asked + count
        trials: dict[str, optuna.Trial] = {}
        states = []
        for _ in range(count):
            trial = self.study.ask(self.space.distributions)
            spec = spec_from_config(
                self.space.config(trial.params), f"t{trial.number:05d}",
                trial_seed(self.seed, trial.number),
            )  # fmt: skip
            trial.set_user_attr(
                WAVE_ATTR, {"wave": w, "trial_id": spec.trial_id, "seed": spec.seed}
            )
            trials[spec.trial_id] = trial
            states.append(TrialState(spec))
        return _Wave(w, trials, states)

    def step(self, waves: list[_Wave]) -> list[_Wave]:
        """Train every wave's current rung at once (each in its own packs, across the
        workers), then rank them oldest first; the waves that go on."""
        plans = [
            self.search.hyperband.plan([s.spec for s in wave.states], wave.w, wave.rung)
            for wave in waves
        ]
        ids = [[[t.trial_id for t in group] for group in groups] for groups in plans]
        resources = [self.points[wave.rung] for wave, g in zip(waves, ids, strict=True) for _ in g]
        started = time.perf_counter()
        trained, losses, switch_s = self.search.executor.train(
            [s for wave in waves for s in wave.states], [g for gs in ids for g in gs], resources
        )
        wall = time.perf_counter() - started
        return [
            wave
            for wave, groups in zip(waves, ids, strict=True)
            if self._ranked(wave, groups, trained, losses, wall, switch_s)
        ]

    def _ranked(self, wave: _Wave, groups, trained, losses, wall: float, switch_s: float) -> bool:
        """Report the wave's rung, tell who stops; whether any trial goes on."""
        i, units = wave.rung, self.points[wave.rung]
        ours = {s.spec.trial_id: losses[s.spec.trial_id] for s in wave.states}  # trial order
        self.records.append(RungRecord(
            wave.w, i, len(ours), units, groups, ours, wall, switch_s,
            {s.spec.trial_id: s.spec for s in wave.states},
        ))  # fmt: skip
        for tid, loss in ours.items():
            wave.trials[tid].report(loss, units)
        self.history[i].extend(ours.values())
        last = i == len(self.points) - 1
        going = set() if last else set(promoted(ours, self.history[i], self.eta))
        for tid, loss in ours.items():
            if last:
                tell_final(self.study, wave.trials[tid], loss)
            elif tid not in going:
                self.study.tell(wave.trials[tid], state=OptunaState.PRUNED)
        self.progress(
            f"wave {wave.w} rung {i}: {len(ours)} trials x r={units} in {len(groups)} pack(s) "
            f"(step {wall:.2f}s); {len(going)} go on"
        )
        wave.states = [trained[s.spec.trial_id] for s in wave.states if s.spec.trial_id in going]
        wave.rung += 1
        return bool(wave.states)

    def result(self, wall_s: float) -> SearchResult:
        """The best trained to R, else the smallest loss at the highest rung reached."""
        top = max(r.rung for r in self.records)
        seen = [
            (_rank(loss), record.specs[tid], record.r)
            for record in self.records if record.rung == top
            for tid, loss in record.losses.items()
        ]  # fmt: skip
        loss, spec, resource = min(seen, key=lambda s: s[0])
        return SearchResult(spec, loss, resource, self.records, wall_s)


def _rank(loss: float) -> float:
    return math.inf if math.isnan(loss) else loss
