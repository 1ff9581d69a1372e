"""Packed Hyperband on an Optuna study: an ask-and-tell driver (issue 22; packing paper §5.2).

An Optuna sampler decides *what* to try and a pruner *whether* to go on, one
trial at a time; neither can decide which trials train together, which is
what Packed Hyperband is about. So rightsize drives the study instead
(Optuna's ask-and-tell interface) and keeps its own Hyperband loop
(:class:`~rightsize.packing.hyperband.Hyperband`):

- a bracket's configurations come from ``study.ask(distributions)``, so the
  study's sampler (TPE, random, an enqueued list) proposes them;
- after every rung each trial's validation loss is reported with
  ``trial.report(loss, step=r)``, ``r`` the resource units it has trained;
- a trial Hyperband drops is told ``PRUNED``; the trials of a bracket's last
  rung are told ``COMPLETE`` with their final loss (``FAIL`` if it diverged);
- trials train in pack_opt's groups exactly as ``rightsize tune`` trains them
  (:func:`~rightsize.packing.runner.prepare_search`), so a configuration gets
  the losses it gets there, bit for bit, and so does a user's own workload
  factory (``TuneSettings.workload = "pkg.module:function"``).

Resuming: the study remembers the search's settings and each finished
bracket's best in its user attributes (``rightsize:*``), and each trial its
bracket, rightsize trial id and seed. Run again on the same storage and study
name, the driver skips the finished brackets, marks the trials an
interrupted bracket left ``RUNNING`` as ``FAIL`` and runs that bracket again
with fresh ``ask``s. One driver per study at a time.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
)
from optuna.trial import TrialState as OptunaState
from sqlalchemy.exc import SQLAlchemyError

from rightsize.core.errors import SpecError, unknown_name
from rightsize.integrations.optuna_pack import (  # noqa: F401 (the batched ask, public here)
    PACKED_ATTR,
    PackedTrial,
    check_minimizing,
    fail_interrupted_packs,
    tell_final,
    train_packed,
)
from rightsize.packing.hyperband import RungRecord, SearchResult, best_seen
from rightsize.packing.runner import (
    Search,
    TuneSettings,
    model_option_names,
    prepare_search,
    run_search,
    trial_id,
)
from rightsize.packing.space import Config, SearchSpace, load_space, parse_space
from rightsize.packing.trial import TrialSpec, spec_from_config, trial_seed
from rightsize.workloads.registry import WorkloadRegistry

#: Study attribute: the settings the search started with (a resumed search must match).
SEARCH_ATTR = "rightsize:search"
#: Study attribute per finished bracket ``s``: its best trial number, loss and resource.
BRACKET_ATTR = "rightsize:bracket:{s}"
#: Trial attribute: ``{"bracket": s, "trial_id": "s2-004", "seed": its weights' seed}`` (one
#: attribute, not three: each is a write, ~5 ms of CPU in an RDB storage).
TRIAL_ATTR = "rightsize"
#: Samplers :func:`make_sampler` builds (``tpe``: multivariate, constant liar).
SAMPLERS = ("tpe", "random")
#: The only hyper-parameter a continuous FloatDistribution may draw (see :func:`optuna_space`).
CONTINUOUS = ("lr",)

Distributions = Mapping[str, BaseDistribution]


@dataclass(frozen=True)
class OptunaSpace:
    """A search space for the driver.

    Attributes:
        distributions: what ``study.ask`` draws from, in rightsize's order
            (``batch_size``, ``optimizer``, ``lr``, then model options).
        packing: the same space as finite value lists, for pack_opt's distance,
            the memory check and the data stream's width. A continuous ``lr`` is
            left out: two trials never share a drawn value, so it says nothing
            about which trials pack well.
    """

    distributions: dict[str, BaseDistribution]
    packing: SearchSpace

    def config(self, params: Mapping[str, Any]) -> Config:
        """A trial's drawn values as a rightsize configuration."""
        return Config(tuple((name, params[name]) for name in self.distributions))


@dataclass(frozen=True)
class StudySearch:
    """A driver's run: the prepared search, the best over the whole study, the brackets run now."""

    search: Search
    result: SearchResult
    brackets_run: tuple[int, ...] = field(default=())


def distributions_from_space(space: SearchSpace) -> dict[str, BaseDistribution]:
    """rightsize's space as Optuna distributions with the same values.

    A whole-number arithmetic list (``batch_size: {from: 20, to: 70, step: 5}``)
    becomes an ordered ``IntDistribution``; any other list a ``CategoricalDistribution``.
    """
    out: dict[str, BaseDistribution] = {}
    for name, values in space.params:
        whole = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        steps = {b - a for a, b in zip(values, values[1:], strict=False)} if whole else set()
        if name in space.numeric and len(steps) == 1:
            out[name] = IntDistribution(values[0], values[-1], step=steps.pop())
        else:
            out[name] = CategoricalDistribution(values)
    return out


def optuna_space(
    space: Distributions | SearchSpace | str | Path, model_options: list[str] | None
) -> OptunaSpace:
    """The driver's space from Optuna distributions, a rightsize space or its YAML file.

    Distributions are checked by rightsize's space rules (required names, known
    model options, batch sizes, optimizer kinds, lr > 0): ``CategoricalDistribution``
    and ``IntDistribution`` for anything, ``FloatDistribution`` for ``lr`` only
    (a batch is whole, a model option a finite set of architectures).

    Args:
        model_options: the workload's option names; None accepts any (a factory).

    Raises:
        SpecError: an unreadable file, a name or value the space rules refuse, or a
            distribution of the wrong kind.
    """
    if isinstance(space, (str, Path)):
        space = load_space(space, model_options)
    if isinstance(space, SearchSpace):
        return OptunaSpace(distributions_from_space(space), space)
    if not isinstance(space, Mapping):
        raise SpecError(
            f"space: expected a dict of name -> optuna distribution, a SearchSpace or a YAML "
            f"path, got {type(space).__name__}"
        )
    data = {name: _values(name, dist) for name, dist in space.items()}
    packing = parse_space(data, model_options, "optuna space")
    order = packing.names
    continuous = [n for n in CONTINUOUS if isinstance(space.get(n), FloatDistribution)]
    if continuous:
        kept = tuple(p for p in packing.params if p[0] not in continuous)
        packing = SearchSpace(kept, packing.numeric - set(continuous))
    return OptunaSpace({name: space[name] for name in order}, packing)


def _values(name: str, dist: Any) -> Any:
    """A distribution as the space YAML's value list (what parse_space checks)."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return {"from": dist.low, "to": dist.high, "step": dist.step}
    if isinstance(dist, FloatDistribution) and name in CONTINUOUS:
        return [dist.low, dist.high]  # both must be valid learning rates
    if isinstance(dist, FloatDistribution):
        raise SpecError(
            f"optuna space: {name}: a FloatDistribution is allowed for lr only; use "
            "IntDistribution or CategoricalDistribution (a batch is whole, a model option "
            "a finite set of architectures)"
        )
    raise SpecError(
        f"optuna space: {name}: expected an optuna distribution (Categorical, Int or, for lr, "
        f"Float), got {type(dist).__name__}"
    )


def make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    """The study's sampler: ``tpe`` or ``random``, seeded.

    ``tpe`` is multivariate TPE with the constant liar: Optuna 5's defaults (its
    release notes, v5.0.0), set explicitly so that 4.x proposes the same way. The
    liar matters here: a bracket's trials are all asked before any is told, and
    without it TPE would propose each of them from the same model.

    Raises:
        UnknownNameError: an unknown kind.
    """
    kind = choose_sampler(kind)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():  # 4.x calls both options experimental; 5.x does not
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(multivariate=True, constant_liar=True, seed=seed)


def choose_sampler(kind: str) -> str:
    """``kind`` if it is one of :data:`SAMPLERS` (SpecError otherwise)."""
    if kind not in SAMPLERS:
        raise unknown_name("sampler", kind, SAMPLERS)
    return kind


def open_study(storage: str, name: str, seed: int = 0, sampler: str = "tpe") -> optuna.Study:
    """Create or load the study ``name`` in ``storage`` (an RDB URL), proposing with
    :func:`make_sampler`'s ``sampler`` seeded by ``seed``.

    Raises:
        SpecError: the storage cannot be opened (bad URL, missing driver, unwritable path),
            or an unknown sampler.
    """
    sampler = make_sampler(sampler, seed)
    try:
        return optuna.create_study(
            storage=storage, study_name=name, sampler=sampler, load_if_exists=True
        )
    except (SQLAlchemyError, ImportError, ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(
            f"--optuna-storage {storage!r}: cannot open it ({reason}); give an RDB URL such "
            "as sqlite:///tune.db"
        ) from None


def optimize(
    study: optuna.Study,
    space: Distributions | SearchSpace | str | Path,
    settings: TuneSettings | None = None,
    registry: WorkloadRegistry | None = None,
    progress: Callable[[str], None] = lambda _line: None,
    small_brackets_first: bool = False,
) -> StudySearch:
    """Run (or resume) Packed Hyperband on ``study``, which minimizes the validation loss.

    Args:
        study: any storage; created with ``direction="minimize"`` (the default).
        space: Optuna distributions, a rightsize space, or the path of a space YAML.
        settings: R, eta, workload, packing… as for ``rightsize tune``.
        registry: resolves the workload (a zoo name or ``pkg.module:function``).
        progress: one line per rung.
        small_brackets_first: run the brackets with the fewest trials first (``s = 0``
            up), not Algorithm 1's order: a bracket's trials are all asked before any
            trains, so a model-based sampler (TPE) proposes from finished trials only
            from the second bracket on, and this order gives it the most finished trials
            before the large brackets ask (a choice beyond Algorithm 1, which is order-free
            in theory; it changes which configurations a sampler proposes). Needs
            sequential brackets.

    Returns:
        The prepared search and the result: the smallest loss seen in the whole
        study (earlier runs' brackets too) and the rungs run now.

    Raises:
        SpecError: a multi-objective or maximizing study, a space the rules refuse,
            a rung resource that is not a whole number of units (Optuna's steps are
            integers), or a study started by a search with other settings.
    """
    settings = settings or TuneSettings()
    registry = registry or WorkloadRegistry()
    resolved = optuna_space(space, model_option_names(registry, settings.workload))
    check_minimizing(study)
    if small_brackets_first and settings.concurrent_brackets:
        raise SpecError(
            "small_brackets_first orders brackets run one after another; concurrent brackets "
            "run side by side (drop one of the two)"
        )
    schedule = settings.schedule()
    _check_whole_resources(schedule)
    fingerprint = _fingerprint(settings, resolved)
    _check_same_search(study, fingerprint)
    driver = _Driver(study, resolved, settings.seed, {b.s: len(b.rungs) for b in schedule})
    search = prepare_search(
        settings, resolved.packing, registry, progress, sample=driver.sample,
        observe=driver.observe,
    )  # fmt: skip
    study.set_user_attr(SEARCH_ATTR, fingerprint)
    _fail_interrupted(study)
    todo = tuple(b.s for b in schedule if BRACKET_ATTR.format(s=b.s) not in study.user_attrs)
    if small_brackets_first:
        todo = tuple(sorted(todo))
    rungs, wall_s = [], 0.0
    if todo and not small_brackets_first:
        ran = run_search(search, todo)
        rungs, wall_s = ran.rungs, ran.wall_s
    else:
        try:  # one bracket at a time, in ``todo``'s order (Hyperband.run keeps Algorithm 1's)
            for s in todo:
                ran = search.hyperband.run({s})
                rungs, wall_s = rungs + ran.rungs, wall_s + ran.wall_s
        finally:
            search.executor.close()
    best, loss, resource = _study_best(study, resolved, [b.s for b in schedule])
    return StudySearch(search, SearchResult(best, loss, resource, rungs, wall_s), todo)


class _Driver:
    """Hyperband's sampler and rung observer, speaking to the study."""

    def __init__(
        self, study: optuna.Study, space: OptunaSpace, seed: int, rungs: dict[int, int]
    ) -> None:
        self.study, self.space, self.seed, self.rungs = study, space, seed, rungs
        self.trials: dict[str, optuna.Trial] = {}
        self.records: dict[int, list[RungRecord]] = {}

    def sample(self, s: int, count: int) -> list[TrialSpec]:
        """Bracket ``s``'s trials, asked of the study; ids and seeds as rightsize's own search."""
        specs = []
        for k in range(count):
            trial = self.study.ask(self.space.distributions)
            spec = spec_from_config(
                self.space.config(trial.params), trial_id(s, k), trial_seed(self.seed, s, k)
            )
            trial.set_user_attr(
                TRIAL_ATTR, {"bracket": s, "trial_id": spec.trial_id, "seed": spec.seed}
            )
            self.trials[spec.trial_id] = trial
            specs.append(spec)
        return specs

    def observe(self, record: RungRecord, promoted: list[str]) -> None:
        """Report the rung's losses; prune the dropped trials, or complete the bracket."""
        for tid, loss in record.losses.items():
            self.trials[tid].report(loss, int(record.r))
        self.records.setdefault(record.bracket, []).append(record)
        if record.rung < self.rungs[record.bracket] - 1:
            for tid in record.losses:
                if tid not in promoted:
                    self.study.tell(self.trials[tid], state=OptunaState.PRUNED)
            return
        for tid, loss in record.losses.items():
            tell_final(self.study, self.trials[tid], loss)
        loss, spec, resource = best_seen(self.records[record.bracket], {record.bracket: 0})
        best = {"trial": self.trials[spec.trial_id].number, "loss": loss, "resource": resource}
        self.study.set_user_attr(BRACKET_ATTR.format(s=record.bracket), best)


def _check_whole_resources(schedule) -> None:
    for bracket in schedule:
        for rung in bracket.rungs:
            if not float(rung.r).is_integer():
                raise SpecError(
                    f"bracket s={bracket.s} trains to r={rung.r:g} units, but Optuna's report "
                    "steps are whole numbers: choose R a power of eta (e.g. R=81, eta=3)"
                )


def _fingerprint(settings: TuneSettings, space: OptunaSpace) -> dict[str, Any]:
    """What a resumed search must share with the first run (packing may differ: it changes
    no result)."""
    data = {
        "max_resource": settings.max_resource, "eta": settings.eta, "seed": settings.seed,
        "algorithm": settings.algorithm, "configurations": settings.configurations,
        "steps_per_unit": settings.steps_per_unit, "resume": settings.resume,
        "workload": settings.workload, "dataset": settings.dataset,
        "dataset_size": settings.dataset_size, "fixed_options": settings.fixed_options,
        "optimizer_impl": settings.pack.optimizer_impl,
        "space": {n: distribution_to_json(d) for n, d in space.distributions.items()},
    }  # fmt: skip
    return json.loads(json.dumps(data))  # as the storage gives it back


def _check_same_search(study: optuna.Study, fingerprint: dict[str, Any]) -> None:
    before = study.user_attrs.get(SEARCH_ATTR)
    if before is None or before == fingerprint:
        return
    key = next(k for k in fingerprint if before.get(k) != fingerprint[k])
    raise SpecError(
        f"study {study.study_name!r} holds a search with {key}={before.get(key)!r}, this one has "
        f"{fingerprint[key]!r}: resume it with the same settings, or use a new study name"
    )


def _fail_interrupted(study: optuna.Study) -> None:
    """Trials an interrupted run left running: FAIL (their bracket runs again)."""
    for trial in study.get_trials(deepcopy=False, states=(OptunaState.RUNNING,)):
        if TRIAL_ATTR in trial.user_attrs:
            study.tell(trial.number, state=OptunaState.FAIL)


def _study_best(
    study: optuna.Study, space: OptunaSpace, brackets: list[int]
) -> tuple[TrialSpec, float, float]:
    """The smallest loss of the finished brackets; ties go to the earlier bracket."""
    bests = [(k, study.user_attrs[BRACKET_ATTR.format(s=s)]) for k, s in enumerate(brackets)]
    _, best = min(bests, key=lambda kb: (_rank(kb[1]["loss"]), kb[0]))
    trial = study.get_trials(deepcopy=False)[best["trial"]]
    config = space.config(trial.params)
    ours = trial.user_attrs[TRIAL_ATTR]
    spec = spec_from_config(config, ours["trial_id"], ours["seed"])
    return spec, best["loss"], best["resource"]


def _rank(loss: float) -> float:
    return math.inf if math.isnan(loss) else loss
