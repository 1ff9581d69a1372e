"""Side by side: Optuna, Ray Tune and rightsize on the same Hyperband search (issue 22 item 2).

One problem for every tool: a workload (``--workload mlp3`` or ``small-cnn``)
on ``digits``, the Table 3 space (examples/spaces/table3.yaml), Hyperband with
R = 81 and eta = 3, one unit of resource = 10 training steps, seed 0. Every
trial, whoever schedules it, trains with rightsize's plain-PyTorch trainer
(``torch.optim`` with ``fused=True``) on rightsize's data stream (step k is the
same batch for all) and is scored by rightsize's validation loss
(tune_peers_common.py). Variants:

- ``optuna-{tpe,random}-{1j,2j}``: ``study.optimize`` with Optuna's
  HyperbandPruner(1, R, eta) and a seeded TPE or random sampler, one trial at
  a time at 2 torch threads (1j) or two at a time, in threads, at 1 (2j:
  ``torch.set_num_threads`` is process-wide); a trial reports its validation
  loss at every unit where a Hyperband rung can end (1, 3, 9, 27, 81) and asks
  ``should_prune`` after each;
- ``ray-hyperband``, ``ray-asha``: Ray Tune's HyperBandScheduler and
  ASHAScheduler over ``tune.choice`` of Table 3's values, a function trainable
  of 1 CPU and 1 torch thread, 2 at a time on ``ray.init(num_cpus=2)``;
- ``rightsize-unpacked`` (2 threads) and ``rightsize-unpacked-2w`` (2 worker
  processes): ``rightsize tune --pack none``;
- ``rightsize-packed``: ``--packed-variant`` of packing_hyperband.py (default
  its best in docs/benchmarks.md: kNN, ragged, concurrent brackets, mixed
  activations, 2 workers, 40Mi), through prepare_search/run_search as the CLI;
- ``rightsize-packed-sha``, ``rightsize-unpacked-2w-sha``: the same two
  rightsize searches with ``--algorithm successive-halving`` over as many
  trials (143): Hyperband's most aggressive bracket alone, the synchronous
  form of the algorithm Ray's ASHA runs (its fair opponent; the unpacked row
  shows how much of the difference is the algorithm and how much packing);
- ``rightsize-optuna-driver``: the same search through
  ``rightsize.integrations.optuna.optimize`` on an in-memory study into which
  rightsize's own draws are enqueued (the CLI's trials, seeds and packs: the
  two differ only by the driver, which is what the 5% goal is about);
  ``rightsize-optuna-driver-random``: the same with the study's seeded random
  sampler proposing (other configurations, so other packs);
- ``rightsize-waves-*`` (issue 41): asynchronous successive halving in packed
  waves through ``rightsize.integrations.optuna_waves.optimize_waves``: the
  study's TPE (or random) sampler asked ``--wave`` trials at a time, told every
  rung before the next wave is asked, ASHA's promotion rule over all waves,
  packs and workers of ``--wave-search``; ``-27x143`` / ``-27x143-r3`` fix the
  wave, the trials and the first rung (docs/tuning.md).

Every peer samples as many configurations as rightsize's Hyperband (143 for R
= 81, eta = 3). Each variant runs in a fresh process (no Ray, Optuna or torch
state leaks); ``--repeats`` runs of each, in a shuffled order per round, and
medians are reported. Per variant:

- wall seconds from the tool's first call to its answer (``ray.init``, study
  creation and ``prepare_search`` included; imports and shutdown not);
- CPU seconds of the variant's whole process tree: RUSAGE_CHILDREN of this
  (subreaper) process, which every descendant that someone waits for reaches,
  plus /proc samples of those nobody waits for (Ray's raylet ignores SIGCHLD,
  so its workers' seconds reach no ancestor; tune_peers_common.run_measured);
- trial-steps counted where training happens: Optuna's and Ray's trials count
  their own steps (a Ray trial reports its count with every result, per
  incarnation, summed over pause and resume); rightsize's are counted around
  the executor's ``train_group`` in every process, its workers included, and
  its own count is kept beside;
- trials started, finished (trained to R) and stopped early;
- the framework's overhead per trial: slot-seconds outside training and
  validation code (slots × wall − seconds inside them) over trials started;
- the best configuration and its loss as the tool saw it (Optuna: its best
  completed trial; Ray and rightsize: the smallest loss at any rung).

Every variant's best is then trained again for the full budget by one common
function (``--retrain-seeds`` seeds, one thread), so quality is compared on
equal terms.

Usage:
    python benchmarks/tune/tune_peers.py --out benchmarks/results/tune_peers_mlp3.json
    python benchmarks/tune/tune_peers.py --workload small-cnn --out benchmarks/results/tune_peers_small_cnn.json
    python benchmarks/tune/tune_peers.py --quick --out /tmp/tune_peers_quick.json  # numbers meaningless
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.load import load_note
from benchmarks.lib.repeats import median_or_none, shuffled_rounds
from benchmarks.tune.packing_common import setup_process, write_report
from benchmarks.tune.packing_hyperband import VARIANTS as SEARCHES
from benchmarks.tune.packing_hyperband import search_arguments, tune_settings
from benchmarks.tune.tune_peers_common import (
    Meter,
    Problem,
    TrialRun,
    become_subreaper,
    build_problem,
    cached_problem,
    hyperband_trial_steps,
    metered_groups,
    plain,
    retrain_loss,
    run_measured,
    self_cpu_s,
    trial_spec,
)
from rightsize.packing.runner import (
    TuneSettings,
    model_option_names,
    prepare_search,
    run_search,
    search_report,
    seeded_sampler,
)
from rightsize.packing.space import load_space
from rightsize.packing.trial import trial_seed
from rightsize.workloads.registry import WorkloadRegistry

#: The repo root: Ray's workers import ``benchmarks.tune.tune_peers_common`` from it.
REPO_ROOT = Path(__file__).resolve().parents[2]
METRIC = "val_loss"
#: Ray: the key of the drawn weight seed in a trial's config (Ray gives trials no number).
SEED_KEY = "weights_seed"
STUDY_NAME = "tune-peers"
#: Seeds of the common re-training come from their own stream of the search seed.
RETRAIN_STREAM = 7


@dataclass(frozen=True)
class PeerVariant:
    """One tool's way to run the search.

    Attributes:
        tool: ``optuna``, ``ray``, ``rightsize`` or ``rightsize-optuna`` (the driver).
        threads: torch threads of each process (or Optuna thread) that trains.
        slots: trials (rightsize: groups) training at once; rightsize's from its search.
        sampler, scheduler: Optuna's sampler; Ray's scheduler.
        search: packing_hyperband.py's variant (None: ``--packed-variant``).
        algorithm: rightsize's search algorithm (``hyperband`` or ``successive-halving``).
        small_first: the driver (or the bracketed waves) runs the brackets with the fewest
            trials first.
        brackets: packed waves over Hyperband's brackets — each bracket one waves run (its
            first rung's trials and resource), largest first, on one study: the sampler
            learns from every earlier bracket, and more trials are confirmed at R.
        wave: packed waves (rightsize-optuna-waves): trials asked at once (None: the
            ``--wave`` option); ``configurations`` trials in all (None: ``--wave-configurations``,
            else as many as Hyperband samples); ``min_units`` the first rung (None:
            ``--wave-min-units``); ``overlap``: a new wave at every rung step.
    """

    tool: str
    threads: int
    slots: int = 1
    sampler: str | None = None
    scheduler: str | None = None
    search: str | None = None
    algorithm: str = "hyperband"
    small_first: bool = False
    wave: int | None = None
    configurations: int | None = None
    min_units: int | None = None
    overlap: bool = True
    brackets: bool = False


SHA = "successive-halving"
VARIANTS = {
    "optuna-tpe-1j": PeerVariant("optuna", 2, 1, sampler="tpe"),
    "optuna-tpe-2j": PeerVariant("optuna", 1, 2, sampler="tpe"),
    "optuna-random-1j": PeerVariant("optuna", 2, 1, sampler="random"),
    "optuna-random-2j": PeerVariant("optuna", 1, 2, sampler="random"),
    "ray-hyperband": PeerVariant("ray", 1, 2, scheduler="hyperband"),
    "ray-asha": PeerVariant("ray", 1, 2, scheduler="asha"),
    "rightsize-unpacked": PeerVariant("rightsize", 2, search="original"),
    "rightsize-unpacked-2w": PeerVariant("rightsize", 1, search="original-2w"),
    "rightsize-packed": PeerVariant("rightsize", 1),
    "rightsize-unpacked-2w-sha": PeerVariant("rightsize", 1, search="original-2w", algorithm=SHA),
    "rightsize-packed-sha": PeerVariant("rightsize", 1, algorithm=SHA),
    "rightsize-optuna-driver": PeerVariant("rightsize-optuna", 1, sampler="rightsize"),
    "rightsize-optuna-driver-random": PeerVariant("rightsize-optuna", 1, sampler="random"),
    # issue 41: the study's multivariate TPE with the constant liar proposing each bracket
    # (brackets in turn, so it learns from the earlier ones), then packed
    "rightsize-optuna-driver-tpe": PeerVariant(
        "rightsize-optuna", 1, sampler="tpe", search="knn-ragged+mix-2w"
    ),
    # the same on the default (concurrent) search and on successive halving: every
    # configuration is asked before any is told, so TPE proposes at random (its startup)
    "rightsize-optuna-driver-tpe-concurrent": PeerVariant("rightsize-optuna", 1, sampler="tpe"),
    "rightsize-optuna-driver-tpe-sha": PeerVariant(
        "rightsize-optuna", 1, sampler="tpe", algorithm=SHA
    ),
    # TPE with the most finished trials before the large brackets ask: s = 0 first
    "rightsize-optuna-driver-tpe-small-first": PeerVariant(
        "rightsize-optuna", 1, sampler="tpe", search="knn-ragged+mix-2w", small_first=True
    ),
    # issue 41: asynchronous successive halving in packed waves, TPE asked a wave at a time
    # after every earlier wave's rungs were reported (rightsize.integrations.optuna_waves);
    # the wave, trials and first rung from --wave, --wave-configurations, --wave-min-units
    "rightsize-waves-tpe": PeerVariant("rightsize-optuna-waves", 1, sampler="tpe"),
    "rightsize-waves-random": PeerVariant("rightsize-optuna-waves", 1, sampler="random"),
    # the next wave asked once the last has finished: TPE sees every rung before it asks
    "rightsize-waves-tpe-sequential": PeerVariant(
        "rightsize-optuna-waves", 1, sampler="tpe", overlap=False
    ),
    # the final comparison's settings, fixed (chosen on MLP-3 seeds 0-1, docs/tuning.md):
    # waves of 27 of 143 trials, first rung 1 unit (all of ASHA's rungs) or 3 (fewer
    # decisions on 10-step losses, more trial-steps)
    "rightsize-waves-tpe-27x143": PeerVariant(
        "rightsize-optuna-waves", 1, sampler="tpe", wave=27, configurations=143, min_units=1
    ),
    "rightsize-waves-tpe-27x143-r3": PeerVariant(
        "rightsize-optuna-waves", 1, sampler="tpe", wave=27, configurations=143, min_units=3
    ),
    "rightsize-waves-tpe-27x143-sequential": PeerVariant(
        "rightsize-optuna-waves",
        1,
        sampler="tpe",
        wave=27,
        configurations=143,
        min_units=1,
        overlap=False,
    ),
    "rightsize-waves-random-27x143": PeerVariant(
        "rightsize-optuna-waves", 1, sampler="random", wave=27, configurations=143, min_units=1
    ),
    # Hyperband's five brackets as waves of at most 27 (81 trials from 1 unit, 34 from 3,
    # 15 from 9, 8 from 27, 5 at R): what docs/tuning.md proposed to close MLP-3's gap
    "rightsize-waves-tpe-brackets": PeerVariant(
        "rightsize-optuna-waves", 1, sampler="tpe", wave=27, brackets=True
    ),
    # the same, the brackets with the fewest trials first (5 at R first): TPE then knows
    # losses at R before the large brackets ask
    "rightsize-waves-tpe-brackets-small-first": PeerVariant(
        "rightsize-optuna-waves", 1, sampler="tpe", wave=27, brackets=True, small_first=True
    ),
}
PEERS = tuple(n for n, v in VARIANTS.items() if v.tool in ("optuna", "ray"))
#: The module each tool imports before its clock starts (its import is not its search).
TOOL_MODULES = {
    "optuna": "optuna",
    "ray": "ray.tune",
    "rightsize": "rightsize.packing.runner",
    "rightsize-optuna": "rightsize.integrations.optuna",
    "rightsize-optuna-waves": "rightsize.integrations.optuna_waves",
}


@dataclass(frozen=True)
class Best:
    """The best configuration as the tool reported it, and the resource its loss was seen at."""

    config: dict[str, Any]
    val_loss: float
    units: float
    trial: str


@dataclass
class VariantResult:
    """What one run of a variant measured (the variant's process fills all but the last three).

    Attributes:
        wall_s: from the tool's first call to its answer (setup included; imports and
            shutdown not).
        trial_steps: training steps counted by the training loops themselves.
        trials_finished: trials trained to R; ``trials_pruned`` stopped before.
        busy_s: slot-seconds inside training and validation code (model building and
            rightsize's checkpoint switches included).
        import_cpu_s: CPU seconds of the variant's process before its clock started.
        details: what only this tool has.
        cpu_s, process_wall_s: the whole process tree's CPU seconds and the process's
            wall seconds, measured by the parent.
    """

    variant: str
    threads: int
    slots: int
    wall_s: float
    trial_steps: int
    trials_started: int
    trials_finished: int
    trials_pruned: int
    busy_s: float
    best: Best | None
    import_cpu_s: float
    details: dict[str, Any] = field(default_factory=dict)
    cpu_s: float = math.nan
    process_wall_s: float = math.nan
    retrain: dict[str, Any] = field(default_factory=dict)

    @property
    def overhead_per_trial_s(self) -> float:
        """Slot-seconds outside training and validation, per trial started."""
        return (self.slots * self.wall_s - self.busy_s) / max(1, self.trials_started)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VariantResult:
        best = Best(**data.pop("best")) if data.get("best") else None
        return cls(best=best, **data)


# --- Optuna ---


def run_optuna(name: str, variant: PeerVariant, args) -> VariantResult:
    import optuna

    from rightsize.integrations.optuna import distributions_from_space

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    meter, start = Meter(), time.perf_counter()
    problem = peer_problem(args)
    samplers = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}
    study = optuna.create_study(
        # HyperbandPruner puts a trial in a bracket by a checksum of the study's name and
        # the trial's number: a fixed name makes the run repeatable (the default is random)
        study_name=STUDY_NAME,
        direction="minimize",
        sampler=samplers[variant.sampler](seed=args.seed),
        pruner=optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=problem.max_units, reduction_factor=args.eta
        ),
    )
    # the driver's own translation of the space: the same values as every other tool's
    distributions = distributions_from_space(problem.space)

    def objective(trial: optuna.Trial) -> float:
        values = {name: _suggest(trial, name, dist) for name, dist in distributions.items()}
        seed = trial_seed(args.seed, trial.number)
        run = TrialRun(trial_spec(problem, values, f"optuna-{trial.number}", seed), problem, meter)
        for units in problem.rung_units:  # only where a rung can end: no other report is read
            run.train_to(problem.steps(units))
            loss = run.validate()
            trial.report(loss, units)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return loss

    study.optimize(objective, n_trials=problem.configurations, n_jobs=variant.slots)
    wall = time.perf_counter() - start
    states = [t.state.name for t in study.trials]
    return VariantResult(
        name, variant.threads, variant.slots, wall, meter.steps, len(study.trials),
        states.count("COMPLETE"), states.count("PRUNED"), meter.busy_s,
        _optuna_best(study, problem), 0.0,
        details={"states": {s: states.count(s) for s in sorted(set(states))},
                 "best_seen_any_rung": _optuna_best_seen(study)},
    )  # fmt: skip


def _suggest(trial, name: str, dist) -> Any:
    """A value from ``dist`` through Optuna's public suggest API."""
    from optuna.distributions import IntDistribution

    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step)
    return trial.suggest_categorical(name, dist.choices)


def _optuna_best(study, problem: Problem) -> Best | None:
    """Optuna's own answer: the best *completed* trial (pruned trials' losses do not count)."""
    try:
        trial = study.best_trial
    except ValueError:  # no trial completed
        return None
    return Best(trial.params, trial.value, problem.max_units, f"optuna-{trial.number}")


def _optuna_best_seen(study) -> dict[str, Any] | None:
    """The smallest loss any trial reported, at any rung (what Hyperband would pick)."""
    seen = [
        (loss, units, t.number, t.params)
        for t in study.trials
        for units, loss in t.intermediate_values.items()
        if not math.isnan(loss)
    ]
    if not seen:
        return None
    loss, units, number, params = min(seen, key=lambda s: s[:3])
    return asdict(Best(params, loss, units, f"optuna-{number}"))


# --- Ray Tune ---


@dataclass(frozen=True)
class RayProblem:
    """What a Ray trial needs to build the problem in its own process."""

    settings: Any  # TuneSettings
    space_path: str
    allocator: str
    checkpoint_at_rungs: bool  # HyperBand pauses trials at rung ends and resumes them later


def ray_trial(config: dict[str, Any], problem_args: RayProblem) -> None:
    """Ray's function trainable: one report per unit (``training_iteration`` = units).

    Only the schedulers' milestones (the rung units) read the loss, so only there
    is it computed; the reports between carry the progress alone
    (TUNE_DISABLE_STRICT_METRIC_CHECKING lets them). HyperBand pauses a trial at
    a rung end and resumes it later from its last checkpoint, so with it every
    rung report carries one. Counters are per incarnation (a resumed trial starts
    a new one) and the parent sums them.
    """
    from ray import tune

    setup_process(1, problem_args.allocator)
    problem = cached_problem(problem_args.settings, problem_args.space_path)
    meter = Meter()
    trial_id = tune.get_context().get_trial_id()
    run = TrialRun(trial_spec(problem, config, trial_id, config[SEED_KEY]), problem, meter)
    units = 0
    if checkpoint := tune.get_checkpoint():
        with checkpoint.as_directory() as folder:
            saved = torch.load(Path(folder) / "trial.pt", weights_only=False)
        run.restore(saved)
        units = saved["units"]
    incarnation = f"i-{uuid.uuid4().hex[:12]}"  # a string that no CSV reader takes for a number
    while units < problem.max_units:
        units += 1
        run.train_to(problem.steps(units))
        metrics: dict[str, Any] = {"units": units, "incarnation": incarnation}
        rung = units in problem.rung_units
        if rung:
            metrics[METRIC] = run.validate()
        metrics.update(steps=meter.steps, busy_s=meter.busy_s)
        if rung and problem_args.checkpoint_at_rungs and units < problem.max_units:
            with tempfile.TemporaryDirectory(dir="/tmp") as folder:
                torch.save({**run.snapshot(), "units": units}, Path(folder) / "trial.pt")
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)


def run_ray(name: str, variant: PeerVariant, args) -> VariantResult:
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    # workers import benchmarks.tune.tune_peers_common; results between rungs carry no loss
    # (see ray_trial)
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    temp = Path(tempfile.mkdtemp(prefix="tune_peers_ray_", dir="/tmp"))
    start = time.perf_counter()
    problem = peer_problem(args)  # the driver's copy: the space, the rung units
    scheduler = {
        "hyperband": lambda: HyperBandScheduler(
            time_attr="training_iteration", max_t=problem.max_units, reduction_factor=args.eta
        ),
        "asha": lambda: ASHAScheduler(
            time_attr="training_iteration", max_t=problem.max_units, grace_period=1,
            reduction_factor=args.eta,
        ),
    }[variant.scheduler]()  # fmt: skip
    ray.init(
        num_cpus=variant.slots, include_dashboard=False, _temp_dir=str(temp / "ray"),
        log_to_driver=False, object_store_memory=80 * 2**20,
    )  # fmt: skip
    try:
        space = {n: tune.choice(list(values)) for n, values in problem.space.params}
        space[SEED_KEY] = tune.randint(0, 2**31 - 1)
        trainable = tune.with_parameters(
            ray_trial,
            problem_args=RayProblem(
                problem.settings, args.space, args.allocator, variant.scheduler == "hyperband"
            ),
        )
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space=space,
            tune_config=tune.TuneConfig(
                metric=METRIC, mode="min", scheduler=scheduler,
                num_samples=problem.configurations,
                search_alg=BasicVariantGenerator(random_state=args.seed),
                # a short trial would otherwise start a fresh actor each (Ray's advice)
                reuse_actors=True,
            ),
            # every checkpoint kept (Ray's default; a few MB in all, removed after the run)
            run_config=tune.RunConfig(storage_path=str(temp / "results"), verbose=0),
        )  # fmt: skip
        grid = tuner.fit()
        wall = time.perf_counter() - start
        return _ray_result(name, variant, problem, grid, wall)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def _ray_result(name: str, variant: PeerVariant, problem: Problem, grid, wall: float):
    """Counts from every result each trial reported (its metrics log, across incarnations)."""
    steps, busy, started, finished, errors, seen, mismatched = 0, 0.0, 0, 0, 0, [], 0
    for result in grid:
        errors += result.error is not None
        frame = result.metrics_dataframe
        if frame is None or frame.empty:  # never reported: never trained
            continue
        started += 1
        # a resumed trial's counters start again from zero: sum each incarnation's last
        last = frame.groupby("incarnation")[["steps", "busy_s"]].max()
        steps, busy = steps + int(last["steps"].sum()), busy + float(last["busy_s"].sum())
        finished += int(frame["units"].max()) >= problem.max_units
        mismatched += int((frame["units"] != frame["training_iteration"]).sum())
        rungs = frame[frame[METRIC].notna()] if METRIC in frame else frame.iloc[:0]
        for _, row in rungs.iterrows():
            seen.append((row[METRIC], row["units"], result.metrics["trial_id"], result.config))
    best = None
    if seen:  # the smallest loss reported at any rung: what Ray's get_best_result(scope="all") sees
        loss, units, trial, config = min(seen, key=lambda s: s[:2])
        config = {k: plain(v) for k, v in config.items() if k != SEED_KEY}
        best = Best(config, float(loss), float(units), trial)
    return VariantResult(
        name, variant.threads, variant.slots, wall, steps, started, finished,
        started - finished - errors, busy, best, 0.0,
        details={"errors": errors, "results_where_units_differ_from_iteration": mismatched,
                 "scheduler": variant.scheduler, "reuse_actors": True,
                 "checkpoints_at_rungs": variant.scheduler == "hyperband"},
    )  # fmt: skip


# --- rightsize ---


def run_rightsize(name: str, variant: PeerVariant, args) -> VariantResult:
    search_name = variant.search or args.packed_variant
    settings = replace(tune_settings(SEARCHES[search_name], args), algorithm=variant.algorithm)
    registry = WorkloadRegistry()
    space = load_space(args.space, model_option_names(registry, args.workload))
    meter = Meter()
    with metered_groups(meter):
        start = time.perf_counter()
        search = prepare_search(settings, space, registry)
        report = search_report(search, run_search(search))
        wall = time.perf_counter() - start
    best = report["best"]
    finished = {t for r in report["rungs"] if r["r"] >= args.max_resource for t in r["losses"]}
    return VariantResult(
        name, variant.threads, settings.workers, wall, meter.steps, len(report["trials"]),
        len(finished), len(report["trials"]) - len(finished), meter.busy_s,
        Best(best["config"], best["val_loss"], best["resource"], best["trial_id"]), 0.0,
        details=_rightsize_details(search_name, report),
    )  # fmt: skip


def _rightsize_details(search_name: str, report: dict[str, Any]) -> dict[str, Any]:
    gate = report.get("pack_gate")
    return {
        "search": search_name,
        "rightsize_trial_steps": report["trial_steps"],  # the executor's own count
        "rightsize_wall_s": report["wall_s"],  # Hyperband's run alone, without prepare_search
        "groups": sum(len(r["packs"]) for r in report["rungs"]),
        "largest_group": max(len(p) for r in report["rungs"] for p in r["packs"]),
        "pack_gate_s": gate["seconds"] if gate else None,
    }


def run_driver(name: str, variant: PeerVariant, args) -> VariantResult:
    import optuna

    from rightsize.integrations.optuna import make_sampler, optimize

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    search_name = variant.search or args.packed_variant
    settings = replace(tune_settings(SEARCHES[search_name], args), algorithm=variant.algorithm)
    registry = WorkloadRegistry()
    space = load_space(args.space, model_option_names(registry, args.workload))
    meter = Meter()
    with metered_groups(meter):
        # "rightsize": random, with rightsize's own draws enqueued; "tpe": multivariate TPE
        # with the constant liar (what the CLI's --optuna-storage opens by default)
        kind = "random" if variant.sampler == "rightsize" else variant.sampler
        study = optuna.create_study(study_name=STUDY_NAME, sampler=make_sampler(kind, args.seed))
        if variant.sampler == "rightsize":
            _enqueue_rightsize_draws(study, settings, space)
        start = time.perf_counter()
        ran = optimize(study, space, settings, registry, small_brackets_first=variant.small_first)
        wall = time.perf_counter() - start
    return _study_result(
        name, variant, settings, study, ran, wall, meter,
        {"search": search_name, "algorithm": variant.algorithm, "sampler": variant.sampler,
         "small_brackets_first": variant.small_first, "rightsize_wall_s": ran.result.wall_s},
    )  # fmt: skip


def _study_result(
    name, variant, settings, study, ran, wall, meter, details, trial_steps=None
) -> VariantResult:
    """A driver's run as a row: the study's trial states, rightsize's best and step count
    (``trial_steps``: those of several runs on the study, ``ran`` the one with the best)."""
    states = [t.state.name for t in study.trials]
    result = ran.result
    best = Best(result.best.config.as_dict(), result.best_loss, result.best_resource,
                result.best.trial_id)  # fmt: skip
    return VariantResult(
        name, variant.threads, settings.workers, wall, meter.steps, len(states),
        states.count("COMPLETE"), states.count("PRUNED"), meter.busy_s, best, 0.0,
        details={**details, "rightsize_trial_steps": (
                     ran.search.executor.trial_steps if trial_steps is None else trial_steps),
                 "states": {s: states.count(s) for s in sorted(set(states))}},
    )  # fmt: skip


def _enqueue_rightsize_draws(study, settings: TuneSettings, space) -> None:
    """Queue the configurations rightsize's own search draws, bracket by bracket in the order
    the driver asks for them: the driver then runs the CLI's very search (same trials, seeds
    and packs), so the two differ only by the driver."""
    sample = seeded_sampler(settings, space)
    for bracket in settings.schedule():
        for spec in sample(bracket.s, bracket.rungs[0].n):
            study.enqueue_trial(spec.config.as_dict())


def run_waves(name: str, variant: PeerVariant, args) -> VariantResult:
    import optuna

    from rightsize.integrations.optuna import make_sampler
    from rightsize.integrations.optuna_waves import WaveSettings, optimize_waves

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    search_name = variant.search or args.wave_search
    settings = tune_settings(SEARCHES[search_name], args)
    registry = WorkloadRegistry()
    space = load_space(args.space, model_option_names(registry, args.workload))
    waves = WaveSettings(
        variant.wave or args.wave, variant.configurations or args.wave_configurations,
        variant.min_units or args.wave_min_units, variant.overlap,
    )  # fmt: skip
    runs = [waves]
    if variant.brackets:
        schedule = settings.schedule()[:: -1 if variant.small_first else 1]
        runs = [WaveSettings(min(waves.wave, b.rungs[0].n), b.rungs[0].n, int(b.rungs[0].r),
                             waves.overlap) for b in schedule]  # fmt: skip
    meter = Meter()
    with metered_groups(meter):
        study = optuna.create_study(
            study_name=STUDY_NAME, sampler=make_sampler(variant.sampler, args.seed)
        )
        start = time.perf_counter()
        rans = [optimize_waves(study, space, settings, run, registry) for run in runs]
        wall = time.perf_counter() - start
    # the study's answer: the best trial trained furthest (to R where any was)
    ran = min(rans, key=lambda r: (-r.result.best_resource, r.result.best_loss))
    groups = [g for r in rans for rung in r.result.rungs for g in rung.groups]
    return _study_result(
        name, variant, settings, study, ran, wall, meter,
        {"search": search_name, "sampler": variant.sampler, "wave": waves.wave,
         "configurations": sum(r.asked for r in rans), "overlap": waves.overlap,
         "min_units": [run.min_units for run in runs] if variant.brackets else waves.min_units,
         "groups": len(groups), "largest_group": max(len(g) for g in groups)},
        trial_steps=sum(r.search.executor.trial_steps for r in rans),
    )  # fmt: skip


RUNNERS = {
    "optuna": run_optuna,
    "ray": run_ray,
    "rightsize": run_rightsize,
    "rightsize-optuna": run_driver,
    "rightsize-optuna-waves": run_waves,
}


# --- the variant's own process ---


def child_main(args) -> int:
    """Run one variant in this (fresh) process and write its result as JSON."""
    name = args.child
    variant = VARIANTS[name]
    try:
        # a missing extra (ray[tune]: pip install -e '.[peers]') is this variant's error
        importlib.import_module(TOOL_MODULES[variant.tool])
        setup_process(variant.threads, args.allocator)
        import_cpu = self_cpu_s()
        result = RUNNERS[variant.tool](name, variant, args)
        result.import_cpu_s = import_cpu
        payload: dict[str, Any] = {"result": asdict(result)}
    except Exception as exc:  # noqa: BLE001 - recorded in the JSON; the other variants go on
        payload = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"{name}: {payload['error']}", file=sys.stderr)
    Path(args.result_file).write_text(json.dumps(payload))
    return 0


def run_variant(name: str, args, argv: list[str]) -> VariantResult | str:
    """Run ``name`` in a fresh process; its result, or why there is none."""
    with tempfile.TemporaryDirectory(prefix="tune_peers_", dir="/tmp") as folder:
        out = Path(folder) / "result.json"
        command = [sys.executable, str(Path(__file__).resolve()), *argv, "--child", name,
                   "--result-file", str(out)]  # fmt: skip
        measured = run_measured(command, args.timeout_s)
        if not out.exists():
            return f"exit status {measured.returncode}, no result"
        payload = json.loads(out.read_text())
    if "error" in payload:
        return payload["error"]
    result = VariantResult.from_json(payload["result"])
    result.cpu_s, result.process_wall_s = measured.cpu_s, measured.wall_s
    result.details["cpu"] = {
        "waited_s": measured.waited_cpu_s, "unwaited_s": measured.unwaited_cpu_s,
        "unwaited_processes": measured.unwaited_processes, "orphans_reaped": measured.orphans,
        "orphans_killed": len(measured.killed),
    }  # fmt: skip
    return result


# --- the parent: rounds, re-training, summary ---


def peer_problem(args) -> Problem:
    """The problem as rightsize's unpacked search sets it up (its stream, models, units)."""
    return build_problem(tune_settings(SEARCHES["original"], args), args.space)


def retrain_bests(runs: dict[str, list[VariantResult]], problem: Problem, args) -> None:
    """Train every run's best configuration for R units with the common function (1 thread)."""
    setup_process(1, args.allocator)
    seeds = [trial_seed(args.seed, RETRAIN_STREAM, i) for i in range(args.retrain_seeds)]
    cache: dict[str, list[float]] = {}
    for results in runs.values():
        for result in results:
            if result.best is None:
                continue
            key = json.dumps(result.best.config, sort_keys=True)
            if key not in cache:
                cache[key] = [retrain_loss(problem, result.best.config, s) for s in seeds]
            losses = cache[key]
            result.retrain = {
                "seeds": seeds,
                "val_losses": losses,
                "mean": statistics.fmean(losses),
            }


def summarize(runs: dict[str, list[VariantResult]], errors: dict[str, list[str]]) -> dict:
    rows = {}
    for name, results in runs.items():
        if not results:
            rows[name] = {"errors": errors.get(name, [])}
            continue
        first = results[0]
        rows[name] = {
            "tool": VARIANTS[name].tool, "threads": first.threads, "slots": first.slots,
            **_medians(results, "wall_s", "cpu_s", "process_wall_s", "import_cpu_s",
                       "busy_s", "overhead_per_trial_s"),
            "walls_s": [r.wall_s for r in results], "cpus_s": [r.cpu_s for r in results],
            "trial_steps": first.trial_steps, "trial_steps_runs": [r.trial_steps for r in results],
            "trials_started": first.trials_started,
            "trials_finished": first.trials_finished, "trials_pruned": first.trials_pruned,
            "same_counts_every_run": len({_counts(r) for r in results}) == 1,
            "best": asdict(first.best) if first.best else None,
            "bests": [asdict(r.best) if r.best else None for r in results],
            "retrain_val_loss": median_or_none([r.retrain.get("mean") for r in results]),
            "retrain": [r.retrain for r in results],
            "details": first.details, "errors": errors.get(name, []),
        }  # fmt: skip
    return rows


def _medians(results: list[VariantResult], *keys: str) -> dict[str, float]:
    return {k: statistics.median(getattr(r, k) for r in results) for k in keys}


def _counts(result: VariantResult) -> tuple:
    return (result.trial_steps, result.trials_started, result.trials_finished)


def compare(rows: dict[str, dict]) -> dict[str, Any]:
    """Wall-time ratios to rightsize-packed, the fastest peer, and the issue's three goals."""
    packed = rows.get("rightsize-packed", {}).get("wall_s")
    for row in rows.values():
        if packed and "wall_s" in row:
            row["wall_vs_packed"] = row["wall_s"] / packed
    peers = {n: r for n, r in rows.items() if n in PEERS and "wall_s" in r}
    out: dict[str, Any] = {"packed_wall_s": packed}
    if peers:
        fastest = min(peers, key=lambda n: peers[n]["wall_s"])
        out.update(fastest_peer=fastest, fastest_peer_wall_s=peers[fastest]["wall_s"],
                   fastest_peer_retrain_val_loss=peers[fastest]["retrain_val_loss"])  # fmt: skip
        if packed:
            out["packed_vs_fastest_peer"] = peers[fastest]["wall_s"] / packed
    driver = rows.get("rightsize-optuna-driver", {}).get("wall_s")
    if driver and packed:
        out["driver_vs_cli"] = driver / packed
    sha = rows.get("rightsize-packed-sha", {})
    if sha.get("wall_s") and peers:
        out["packed_sha_vs_fastest_peer"] = peers[fastest]["wall_s"] / sha["wall_s"]
        out["packed_sha_retrain_val_loss"] = sha["retrain_val_loss"]
    if sha.get("wall_s") and "wall_s" in rows.get("ray-asha", {}):
        out["packed_sha_vs_ray_asha"] = rows["ray-asha"]["wall_s"] / sha["wall_s"]
    quality = rows.get("rightsize-packed", {}).get("retrain_val_loss")
    out["packed_retrain_val_loss"] = quality
    out["goals"] = {
        "packed_1.3x_fastest_peer": out.get("packed_vs_fastest_peer", 0) >= 1.3,
        "driver_within_5pct_of_cli": abs(out.get("driver_vs_cli", math.inf) - 1) <= 0.05,
        "packed_quality_at_least_peer": quality is not None
        and out.get("fastest_peer_retrain_val_loss") is not None
        and quality <= out["fastest_peer_retrain_val_loss"],
    }
    return out


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    search_arguments(parser)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--repeats", type=int, default=1, help="runs of each (medians kept)")
    parser.add_argument(
        "--packed-variant", default="knn-ragged-concurrent+mix-2w", choices=sorted(SEARCHES),
        help="packing_hyperband.py's search for rightsize-packed and the driver",
    )  # fmt: skip
    parser.add_argument("--wave", type=int, default=27, help="waves: trials asked at once")
    parser.add_argument(
        "--wave-configurations", type=int, default=None,
        help="waves: trials in all (default: as many as Hyperband samples)",
    )  # fmt: skip
    parser.add_argument("--wave-min-units", type=int, default=1, help="waves: first rung")
    parser.add_argument(
        "--wave-search", default="knn-ragged+mix-2w", choices=sorted(SEARCHES),
        help="packing_hyperband.py's search whose packing and workers the waves use",
    )  # fmt: skip
    parser.add_argument("--retrain-seeds", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=3600, help="per variant run")
    parser.add_argument("--quick", action="store_true", help="R=9, 2 steps per unit: a smoke run")
    parser.add_argument("--out", default="benchmarks/results/tune_peers_mlp3.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # run this variant here
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.max_resource, args.steps_per_unit = 9, 2
    unknown = [n for n in args.variants.split(",") if n not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; have {list(VARIANTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    subreaper = become_subreaper()
    names = args.variants.split(",")
    runs: dict[str, list[VariantResult]] = {n: [] for n in names}
    errors: dict[str, list[str]] = {n: [] for n in names}
    for repeat, order in shuffled_rounds(names, args.repeats, args.seed):
        for name in order:
            outcome = run_variant(name, args, argv)
            if isinstance(outcome, str):
                errors[name].append(outcome)
                print(f"run {repeat + 1}/{args.repeats} {name:24s} failed: {outcome}", file=sys.stderr)  # fmt: skip
                continue
            runs[name].append(outcome)
            _print_run(repeat, args.repeats, outcome)
    problem = peer_problem(args)
    retrain_bests(runs, problem, args)
    rows = summarize(runs, errors)
    comparison = compare(rows)
    _print_summary(rows, comparison)
    body = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "child", "result_file")},
        "space_size": problem.space.size,
        "configurations": problem.configurations,
        "rung_units": list(problem.rung_units),
        "hyperband_trial_steps": hyperband_trial_steps(problem),
        "successive_halving_trial_steps": hyperband_trial_steps(problem, SHA),
        "cpu_accounting": (
            "RUSAGE_CHILDREN of a subreaper parent" if subreaper else "RUSAGE_CHILDREN"
        ) + " + /proc samples of processes whose parent ignores SIGCHLD",
        "load": load_note(),
        "variants": rows,
        "comparison": comparison,
    }  # fmt: skip
    write_report(args.out, "tune_peers", argv, body)
    return 0


def _print_run(repeat: int, repeats: int, r: VariantResult) -> None:
    best = f"{r.best.val_loss:.5f} at {r.best.units:g} {r.best.config}" if r.best else "none"
    print(
        f"run {repeat + 1}/{repeats} {r.variant:24s} {r.wall_s:7.1f}s (cpu {r.cpu_s:7.1f}s) "
        f"{r.trial_steps:6d} trial-steps, {r.trials_started} trials ({r.trials_finished} to R, "
        f"{r.trials_pruned} stopped), overhead {1000 * r.overhead_per_trial_s:.0f} ms/trial, "
        f"best {best}",
        file=sys.stderr, flush=True,
    )  # fmt: skip


def _print_summary(rows: dict[str, dict], comparison: dict[str, Any]) -> None:
    for name, row in rows.items():
        if "wall_s" not in row:
            print(f"{name:24s} no result: {row['errors']}", file=sys.stderr)
            continue
        retrain = row["retrain_val_loss"]
        print(
            f"{name:24s} wall {row['wall_s']:7.1f}s  x{row.get('wall_vs_packed', math.nan):5.2f} "
            f"of packed  cpu {row['cpu_s']:7.1f}s  steps {row['trial_steps']:6d}  "
            f"re-trained loss {'-' if retrain is None else f'{retrain:.5f}'}",
            file=sys.stderr,
        )
    print(f"comparison: {json.dumps(comparison)}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
