"""Packed Hyperband as an Optuna ask-and-tell driver, against real Optuna (MLP-3 on digits).

R = 9, eta = 3: brackets s=2 (9,1) (3,3) (1,9); s=1 (5,3) (1,9); s=0 (3,9) — 17 trials,
of which 1 + 1 + 3 = 5 complete and 12 are pruned.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from optuna.distributions import (  # noqa: E402
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState as OptunaState  # noqa: E402
from tests.test_packing_probe import SETTINGS, SPACE, one_thread  # noqa: E402, F401 (a fixture)

from rightsize.cli.main import main  # noqa: E402
from rightsize.core.errors import SpecError, UnknownNameError  # noqa: E402
from rightsize.integrations.optuna import (  # noqa: E402
    BRACKET_ATTR,
    TRIAL_ATTR,
    distributions_from_space,
    make_sampler,
    optimize,
    optuna_space,
)
from rightsize.packing.hyperband import Hyperband  # noqa: E402
from rightsize.packing.optimizers import OptimizerSpec  # noqa: E402
from rightsize.packing.packopt import PackOptSettings  # noqa: E402
from rightsize.packing.probe import ProbeSettings  # noqa: E402
from rightsize.packing.runner import TuneSettings, prepare_search, run_search  # noqa: E402
from rightsize.packing.space import load_space  # noqa: E402
from rightsize.packing.trial import TrialSpec, TrialState  # noqa: E402

COMPLETE_PER_BRACKET = {2: 1, 1: 1, 0: 3}

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def space(tmp_path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    return path


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """rightsize's own Packed Hyperband on the space: its trials (in sampling order) and result."""
    path = tmp_path_factory.mktemp("own") / "space.yaml"
    path.write_text(SPACE)
    search = prepare_search(SETTINGS, load_space(path, ["activation"]), _registry())
    return search.trials, run_search(search)


def _registry():
    from rightsize.workloads.registry import WorkloadRegistry

    return WorkloadRegistry()


def _losses_by_trial(result) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for record in result.rungs:
        for tid, loss in record.losses.items():
            out.setdefault(tid, {})[int(record.r)] = loss
    return out


def _ours(study):
    return [t for t in study.trials if TRIAL_ATTR in t.user_attrs]


def _enqueue(study, trials, brackets):
    for spec in trials.values():
        if int(spec.trial_id[1]) in brackets:
            study.enqueue_trial(spec.config.as_dict())


# -- the space -----------------------------------------------------------------------------


def test_yaml_space_becomes_optuna_distributions_with_the_same_values(space):
    converted = distributions_from_space(load_space(space, ["activation"]))
    assert converted == {
        "batch_size": IntDistribution(16, 32, step=8),  # whole, evenly spaced: ordered
        "optimizer": CategoricalDistribution(["adam", "momentum"]),
        "lr": CategoricalDistribution([0.01, 0.1]),  # not evenly spaced: categorical
        "activation": CategoricalDistribution(["relu", "tanh"]),
    }


def test_distributions_a_continuous_lr_is_left_out_of_packing_distances():
    dists = {
        "activation": CategoricalDistribution(["relu", "tanh"]),
        "lr": FloatDistribution(1e-4, 0.1, log=True),
        "optimizer": CategoricalDistribution(["sgd", "adam"]),
        "batch_size": IntDistribution(16, 64, step=16),
    }
    resolved = optuna_space(dists, ["activation"])
    assert list(resolved.distributions) == ["batch_size", "optimizer", "lr", "activation"]
    assert resolved.packing.names == ["batch_size", "optimizer", "activation"]
    assert resolved.packing.values("batch_size") == (16, 32, 48, 64)
    config = resolved.config(
        {"lr": 0.003, "batch_size": 32, "optimizer": "adam", "activation": "tanh"}
    )
    assert config.label() == "batch_size=32 optimizer=adam lr=0.003 activation=tanh"
    assert resolved.packing.indices(config) == (1, 1, 1)


@pytest.mark.parametrize(
    "dists, fragment",
    [
        ({"batch_size": FloatDistribution(16, 64)}, "FloatDistribution is allowed for lr only"),
        ({"batch_size": [16, 32]}, "expected an optuna distribution"),
        (
            {"batch_size": IntDistribution(16, 32), "optimizer": CategoricalDistribution(["adam"]),
             "lr": CategoricalDistribution([0.1]), "activaton": CategoricalDistribution(["relu"])},
            "did you mean 'activation'",
        ),
        (
            {"batch_size": IntDistribution(16, 32), "optimizer": CategoricalDistribution(["adamw"]),
             "lr": CategoricalDistribution([0.1])},
            "unknown optimizer 'adamw'",
        ),
        (
            {"batch_size": IntDistribution(16, 32), "optimizer": CategoricalDistribution(["adam"]),
             "lr": FloatDistribution(0.0, 0.1)},
            "lr 0.0 must be > 0",
        ),
    ],
)  # fmt: skip
def test_bad_distributions_are_one_clear_error(dists, fragment):
    with pytest.raises(SpecError, match=fragment):
        optimize(optuna.create_study(), dists, SETTINGS)


def test_bad_studies_and_schedules_are_refused_before_any_training(space):
    with pytest.raises(SpecError, match="direction.*maximize.*direction='minimize'"):
        optimize(optuna.create_study(direction="maximize"), space, SETTINGS)
    with pytest.raises(SpecError, match="direction"):
        optimize(optuna.create_study(directions=["minimize", "minimize"]), space, SETTINGS)
    study = optuna.create_study()
    with pytest.raises(SpecError, match=r"r=1\.11111 units.*whole numbers"):
        optimize(study, space, _replace(max_resource=10))
    assert study.trials == [] and study.user_attrs == {}  # untouched


def _replace(**changes) -> TuneSettings:
    from dataclasses import replace

    return replace(SETTINGS, **changes)


# -- the Hyperband hooks the driver uses (a scripted trainer, no training) ---------------------


class ScriptedTrainer:
    """Loss of a trial = its seed / resource."""

    def train(self, states, groups, resource):
        trained = {s.spec.trial_id: TrialState(s.spec, step=int(resource)) for s in states}
        return trained, {s.spec.trial_id: s.spec.seed / resource for s in states}, 0.0


def _scripted(concurrent, told, sampled):
    def sample(s, count):
        sampled.append(s)
        # seeds 9, 8, ... 1: the later a trial is sampled, the smaller its loss
        return [TrialSpec(f"s{s}-{k:03d}", 16, OptimizerSpec("sgd", 0.1), seed=count - k)
                for k in range(count)]  # fmt: skip

    return Hyperband(
        9, 3, sample, lambda trials, s, i: [[t] for t in trials], ScriptedTrainer(),
        concurrent=concurrent, observe=lambda record, promoted: told.append(
            (record.bracket, record.rung, list(record.losses), promoted)),
    )  # fmt: skip


@pytest.mark.parametrize("concurrent", [False, True])
def test_hyperband_tells_each_ranked_rung_and_runs_only_the_brackets_asked(concurrent):
    told, sampled = [], []
    result = _scripted(concurrent, told, sampled).run(brackets={2, 0})
    assert sampled == [2, 0]  # bracket s=1 is neither sampled nor trained
    by_rung = {(s, i): (ids, promoted) for s, i, ids, promoted in told}
    assert sorted(by_rung) == [(0, 0), (2, 0), (2, 1), (2, 2)]
    assert by_rung[2, 0][1] == ["s2-008", "s2-007", "s2-006"]  # the 3 smallest losses of 9
    assert by_rung[2, 1] == (["s2-008", "s2-007", "s2-006"], ["s2-008"])
    assert by_rung[2, 2] == (["s2-008"], [])  # after a bracket's last rung: nobody goes on
    assert by_rung[0, 0] == (["s0-000", "s0-001", "s0-002"], [])
    assert (result.best.trial_id, result.best_loss) == ("s2-008", 1 / 9)


# -- the search ------------------------------------------------------------------------------


@pytest.mark.parametrize("concurrent", [False, True])
def test_same_configurations_give_rightsize_own_losses_bit_for_bit(space, own, concurrent):
    trials, result = own
    study = optuna.create_study()
    _enqueue(study, trials, {2, 1, 0})  # the study proposes rightsize's own configurations
    settings = _replace(concurrent_brackets=concurrent, packopt=PackOptSettings("random"))
    ran = optimize(study, space, settings)

    expected = _losses_by_trial(result)
    ours = _ours(study)
    assert len(ours) == len(study.trials) == 17
    for trial in ours:
        tid = trial.user_attrs[TRIAL_ATTR]["trial_id"]
        assert trial.params == trials[tid].config.as_dict()
        assert trial.intermediate_values == expected[tid]  # every rung, bit for bit
    assert ran.result.best_loss == result.best_loss
    assert ran.result.best.config == result.best.config and ran.brackets_run == (2, 1, 0)
    assert ran.result.best.trial_id == result.best.trial_id
    assert [r.losses for r in ran.result.rungs] == [r.losses for r in result.rungs]
    _check_states(study)


def test_small_brackets_first_asks_them_first_and_changes_no_trials_losses(space, own):
    trials, result = own
    study = optuna.create_study()
    for s in (0, 1, 2):  # enqueued in the order the driver now asks
        _enqueue(study, trials, {s})
    ran = optimize(study, space, SETTINGS, small_brackets_first=True)
    assert ran.brackets_run == (0, 1, 2)
    brackets = [t.user_attrs[TRIAL_ATTR]["bracket"] for t in study.trials]
    assert brackets == [0] * 3 + [1] * 5 + [2] * 9
    expected = _losses_by_trial(result)  # a trial's id, seed and losses do not depend on order
    for trial in _ours(study):
        assert trial.intermediate_values == expected[trial.user_attrs[TRIAL_ATTR]["trial_id"]]
    assert ran.result.best == result.best and ran.result.best_loss == result.best_loss
    _check_states(study)
    with pytest.raises(SpecError, match="small_brackets_first.*concurrent"):
        optimize(optuna.create_study(), space, _replace(concurrent_brackets=True),
                 small_brackets_first=True)  # fmt: skip


def _check_states(study):
    """The trials of each bracket's last rung complete with their final loss; the rest pruned."""
    complete = [t for t in _ours(study) if t.state == OptunaState.COMPLETE]
    pruned = [t for t in _ours(study) if t.state == OptunaState.PRUNED]
    for s, count in COMPLETE_PER_BRACKET.items():
        assert sum(t.user_attrs[TRIAL_ATTR]["bracket"] == s for t in complete) == count
    assert len(complete) + len(pruned) == 17
    for trial in complete:
        assert max(trial.intermediate_values) == 9  # trained to R
        assert trial.value == trial.intermediate_values[9]
    for trial in pruned:
        assert max(trial.intermediate_values) < 9
        assert trial.value == trial.intermediate_values[max(trial.intermediate_values)]


def test_tpe_proposes_and_a_completed_trial_matches_training_it_alone(space):
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=4))
    ran = optimize(study, space, _replace(packopt=PackOptSettings("knn")))
    _check_states(study)
    assert study.best_value == min(t.value for t in _ours(study) if t.state == OptunaState.COMPLETE)
    # rightsize's best: the smallest loss seen at any rung (a pruned trial's too)
    seen = [v for t in _ours(study) for v in t.intermediate_values.values() if v == v]
    assert ran.result.best_loss == min(seen)

    # the best completed trial, trained alone with plain PyTorch to R in one go
    best = study.best_trial
    alone = prepare_search(
        _replace(packopt=PackOptSettings("none")), optuna_space(space, ["activation"]).packing,
        _registry(),
    )  # fmt: skip
    trial_spec = {s.trial_id: s for s in _specs(ran)}[best.user_attrs[TRIAL_ATTR]["trial_id"]]
    _, losses, _ = alone.executor.train([TrialState(trial_spec)], [[trial_spec.trial_id]], 9)
    assert losses[trial_spec.trial_id] == best.value


@pytest.mark.parametrize("algorithm", ["hyperband", "successive-halving"])
def test_multivariate_tpe_with_the_liar_proposes_each_rung_before_it_is_packed(space, algorithm):
    # Optuna 5's default TPE (set explicitly, so 4.x too), learning after 4 finished trials
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tpe = optuna.samplers.TPESampler(multivariate=True, constant_liar=True, seed=2,
                                         n_startup_trials=4)  # fmt: skip
    study = optuna.create_study(sampler=tpe)
    sha = algorithm == "successive-halving"
    settings = _replace(algorithm=algorithm, configurations=9 if sha else None,
                        packopt=PackOptSettings("knn"), memory_limit_bytes=None,
                        probe=ProbeSettings(enabled=False))  # fmt: skip (pack_opt's own packs)
    ran = optimize(study, space, settings)
    firsts = [r for r in ran.result.rungs if r.rung == 0]
    assert [r.n for r in firsts] == ([9] if sha else [9, 5, 3])
    for rung in firsts:  # packed after all of the rung's proposals: packs of several
        assert sorted(i for g in rung.groups for i in g) == sorted(rung.losses)
        assert max(len(g) for g in rung.groups) > 1
    states = [t.state for t in _ours(study)]
    assert len(states) == sum(r.n for r in firsts) and OptunaState.RUNNING not in states
    assert states.count(OptunaState.COMPLETE) == (1 if sha else 5)
    assert study.best_value == min(t.value for t in _ours(study) if t.state == OptunaState.COMPLETE)


def test_make_sampler_builds_seeded_samplers_and_refuses_unknown_kinds():
    first, again = make_sampler("tpe", 3), make_sampler("tpe", 3)
    assert isinstance(first, optuna.samplers.TPESampler)
    assert isinstance(make_sampler("random", 3), optuna.samplers.RandomSampler)
    space = {"x": IntDistribution(0, 1000)}
    draws = [optuna.create_study(sampler=s).ask(space).params["x"] for s in (first, again)]
    assert draws[0] == draws[1]  # seeded
    with pytest.raises(UnknownNameError, match="unknown sampler 'tpee'.*did you mean 'tpe'"):
        make_sampler("tpee", 0)


def _specs(ran):
    return [spec for record in ran.result.rungs for spec in record.specs.values()]


class Interrupted(Exception):
    pass


def test_rdb_study_resumes_without_redoing_finished_brackets(space, own, tmp_path):
    trials, result = own
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    study = optuna.create_study(storage=storage, study_name="digits")
    _enqueue(study, trials, {2, 1})

    def stop_in_bracket_1(line: str) -> None:
        if line.startswith("bracket s=1 rung 0"):
            raise Interrupted  # the process dies after training s=1's first rung

    with pytest.raises(Interrupted):
        optimize(study, space, SETTINGS, progress=stop_in_bracket_1)
    assert BRACKET_ATTR.format(s=2) in study.user_attrs
    assert BRACKET_ATTR.format(s=1) not in study.user_attrs

    # a new process: the same storage and study name
    again = optuna.load_study(storage=storage, study_name="digits")
    assert [t.state for t in again.trials].count(OptunaState.RUNNING) == 5
    _enqueue(again, trials, {1, 0})
    lines: list[str] = []
    ran = optimize(again, space, SETTINGS, progress=lines.append)
    assert ran.brackets_run == (1, 0)
    assert not any(line.startswith("bracket s=2") for line in lines)  # not trained again

    states = [t.state for t in again.trials]
    assert len(states) == 9 + 5 + 5 + 3 and states.count(OptunaState.FAIL) == 5
    expected = _losses_by_trial(result)
    done = [t for t in _ours(again) if t.state != OptunaState.FAIL]
    assert {t.user_attrs[TRIAL_ATTR]["trial_id"] for t in done} == set(expected)
    for trial in done:
        assert trial.intermediate_values == expected[trial.user_attrs[TRIAL_ATTR]["trial_id"]]
    assert ran.result.best_loss == result.best_loss and ran.result.best == result.best

    # a finished study: nothing to train, the same best
    third = optimize(optuna.load_study(storage=storage, study_name="digits"), space, SETTINGS)
    assert third.brackets_run == () and third.result.rungs == []
    assert third.result.best == result.best and len(again.trials) == 22


def test_a_resumed_study_must_keep_the_search_settings(space, tmp_path):
    study = optuna.create_study()
    small = _replace(max_resource=3, steps_per_unit=1)
    optimize(study, space, small)
    with pytest.raises(SpecError, match="holds a search with seed=4, this one has 5"):
        optimize(study, space, _replace(max_resource=3, steps_per_unit=1, seed=5))
    # packing changes no result: another strategy may resume it
    assert optimize(study, space, _replace(max_resource=3, steps_per_unit=1,
                                           packopt=PackOptSettings("none"))).brackets_run == ()  # fmt: skip


def test_successive_halving_drives_a_study_and_a_resume_must_keep_it(space):
    study = optuna.create_study()
    sha = _replace(
        max_resource=3, steps_per_unit=1, algorithm="successive-halving", configurations=5
    )
    ran = optimize(study, space, sha)
    # R = 3, eta = 3: one bracket, (5, 1) then (1, 3): one trial completes, four are pruned
    states = [t.state for t in _ours(study)]
    assert ran.brackets_run == (1,) and len(states) == 5
    assert states.count(OptunaState.COMPLETE) == 1 and states.count(OptunaState.PRUNED) == 4
    with pytest.raises(SpecError, match="algorithm='successive-halving', this one has 'hyperband'"):
        optimize(study, space, _replace(max_resource=3, steps_per_unit=1))


def test_a_users_own_workload_factory_plugs_in(tmp_path, monkeypatch):
    # a module name no other test writes: sys.modules would hand back another test's module
    (tmp_path / "optuna_user_jobs.py").write_text(
        "import torch\n"
        "from rightsize.workloads import Workload, make_dataset\n\n"
        "def make_job(width=16):\n"
        "    return Workload('my-job', make_dataset('digits'), lambda: torch.nn.Sequential(\n"
        "        torch.nn.Flatten(), torch.nn.Linear(64, width), torch.nn.ReLU(),\n"
        "        torch.nn.Linear(width, 10)))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    dists = {
        "batch_size": IntDistribution(16, 32, step=16),
        "optimizer": CategoricalDistribution(["adam", "sgd"]),
        "lr": FloatDistribution(1e-3, 0.1, log=True),
        "width": CategoricalDistribution([8, 24]),  # the factory's own option
    }
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    settings = _replace(workload="optuna_user_jobs:make_job", dataset=None, max_resource=3,
                        steps_per_unit=1)  # fmt: skip
    ran = optimize(study, dists, settings)
    assert len(study.trials) == 5 and {t.params["width"] for t in study.trials} <= {8, 24}
    assert ran.search.architectures.workload((("width", 8),)).name == "my-job"
    assert ran.result.best_loss == min(
        v for t in study.trials for v in t.intermediate_values.values() if v == v
    )


# -- the command line ------------------------------------------------------------------------


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_tune_writes_into_an_optuna_study_and_resumes_it(capsys, space, tmp_path):
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    argv = (
        "tune", "--space", str(space), "--dataset", "digits", "--max-resource", "3",
        "--steps-per-unit", "1", "--seed", "2", "--threads", "1", "--allocator", "default",
        "--optuna-storage", storage, "--optuna-study", "cli", "--json",
    )  # fmt: skip
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    first = json.loads(out)
    assert first["optuna"]["brackets_run"] == [1, 0] and first["optuna"]["trials"] == 5
    assert first["optuna"]["sampler"] == "tpe"  # the default: multivariate TPE with the liar
    study = optuna.load_study(storage=storage, study_name="cli")
    assert first["best"]["val_loss"] == min(
        v for t in study.trials for v in t.intermediate_values.values()
    )
    code, out, _ = run_cli(capsys, *argv)
    second = json.loads(out)
    assert code == 0 and second["optuna"]["brackets_run"] == [] and second["trial_steps"] == 0
    assert second["best"] == first["best"]


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--optuna-storage", "bogus://nowhere", "--optuna-study", "x"], "cannot open it"),
        (["--optuna-storage", "sqlite:///x.db"], "go together"),
        (["--optuna-study", "x"], "go together"),
    ],
)
def test_bad_optuna_arguments_are_one_line_and_exit_2(capsys, space, extra, fragment):
    code, out, err = run_cli(capsys, "tune", "--space", str(space), *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err
