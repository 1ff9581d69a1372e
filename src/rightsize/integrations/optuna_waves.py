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

Then the next wave is asked, from a sampler that has seen every rung so far,
until ``configurations`` trials were asked. A trial's weights are seeded from
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
from rightsize.integrations.optuna_pack import check_minimizing
from rightsize.packing.hyperband import RungRecord, SearchResult, sampled
from rightsize.packing.runner import Search, TuneSettings, model_option_names, prepare_search
from rightsize.packing.space import SearchSpace
from rightsize.packing.trial import TrialSpec, TrialState, spec_from_config, trial_seed
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
    """

    wave: int = 27
    configurations: int | None = None
    min_units: int = 1

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
    run = _WaveRun(study, search, points, settings.eta, progress)
    try:
        for w, first in enumerate(range(0, total, waves.wave)):
            trials = [
                study.ask(resolved.distributions) for _ in range(min(waves.wave, total - first))
            ]
            specs = []
            for trial in trials:
                spec = spec_from_config(
                    resolved.config(trial.params), f"t{trial.number:05d}",
                    trial_seed(settings.seed, trial.number),
                )  # fmt: skip
                trial.set_user_attr(
                    WAVE_ATTR, {"wave": w, "trial_id": spec.trial_id, "seed": spec.seed}
                )
                specs.append(spec)
            run.wave(w, dict(zip((s.trial_id for s in specs), trials, strict=True)), specs)
    finally:
        search.executor.close()
    return WaveSearch(search, run.result(time.perf_counter() - start), total)


class _WaveRun:
    """The waves' state: each rung's losses so far and every rung's record."""

    def __init__(self, study, search: Search, points: list[int], eta: float, progress) -> None:
        self.study, self.search, self.points, self.eta = study, search, points, eta
        self.progress = progress
        self.history: list[list[float]] = [[] for _ in points]
        self.records: list[RungRecord] = []

    def wave(self, w: int, trials: dict[str, optuna.Trial], specs: list[TrialSpec]) -> None:
        states = [TrialState(spec) for spec in specs]
        for i, units in enumerate(self.points):
            groups = self.search.hyperband.plan([s.spec for s in states], w, i)
            ids = [[t.trial_id for t in group] for group in groups]
            started = time.perf_counter()
            trained, losses, switch_s = self.search.executor.train(states, ids, units)
            wall = time.perf_counter() - started
            losses = {s.spec.trial_id: losses[s.spec.trial_id] for s in states}  # trial order
            record = RungRecord(
                w, i, len(states), units, ids, losses, wall, switch_s,
                {s.spec.trial_id: s.spec for s in states},
            )  # fmt: skip
            self.records.append(record)
            for tid, loss in losses.items():
                trials[tid].report(loss, units)
            self.history[i].extend(losses.values())
            last = i == len(self.points) - 1
            going = set() if last else set(promoted(losses, self.history[i], self.eta))
            for tid, loss in losses.items():
                if last:
                    self._finish(trials[tid], loss)
                elif tid not in going:
                    self.study.tell(trials[tid], state=OptunaState.PRUNED)
            self.progress(
                f"wave {w} rung {i}: {len(states)} trials x r={units} in {len(groups)} pack(s) "
                f"— {wall:.2f}s; {len(going)} go on"
            )
            states = [trained[s.spec.trial_id] for s in states if s.spec.trial_id in going]
            if not states:
                return

    def _finish(self, trial: optuna.Trial, loss: float) -> None:
        if math.isfinite(loss):
            self.study.tell(trial, loss)
        else:
            self.study.tell(trial, state=OptunaState.FAIL)

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
