"""Hyperband's bracket table (Li et al. Algorithm 1) and its loop, driven by a scripted trainer."""

from __future__ import annotations

import math
import re

import pytest

from rightsize.core.errors import RightsizeError, SpecError
from rightsize.packing.hyperband import (
    Hyperband,
    hyperband_schedule,
    search_schedule,
    successive_halving_schedule,
)
from rightsize.packing.optimizers import OptimizerSpec
from rightsize.packing.trial import TrialSpec, TrialState

# The table for R = 81, eta = 3, as (n_i, r_i) per bracket.
TABLE_81_3 = {
    4: [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
    3: [(34, 3), (11, 9), (3, 27), (1, 81)],
    2: [(15, 9), (5, 27), (1, 81)],
    1: [(8, 27), (2, 81)],
    0: [(5, 81)],
}


def test_bracket_table_for_r81_eta3():
    schedule = hyperband_schedule(81, 3)
    assert [b.s for b in schedule] == [4, 3, 2, 1, 0]
    assert {b.s: [(r.n, r.r) for r in b.rungs] for b in schedule} == TABLE_81_3


def test_bracket_table_small_cases():
    # R = 9, eta = 3: s_max = 2, B = 27; s=2: n = ceil(27/9 * 9/3) = 9, r = 1
    assert [[(r.n, r.r) for r in b.rungs] for b in hyperband_schedule(9, 3)] == [
        [(9, 1), (3, 3), (1, 9)],
        [(5, 3), (1, 9)],  # n = ceil(3 * 3/2) = 5
        [(3, 9)],
    ]
    assert [[(r.n, r.r) for r in b.rungs] for b in hyperband_schedule(1, 3)] == [[(1, 1)]]
    # log_3(243) is 4.999... in floats; the schedule must still have s_max = 5
    assert hyperband_schedule(243, 3)[0].s == 5


@pytest.mark.parametrize("eta", [1, 0.5, -3])
def test_eta_must_exceed_one(eta):
    with pytest.raises(SpecError, match="eta must be > 1"):
        hyperband_schedule(81, eta)


def test_resource_must_be_at_least_one():
    with pytest.raises(SpecError, match="max resource R must be >= 1"):
        hyperband_schedule(0.5, 3)


def test_successive_halving_is_the_top_bracket_over_as_many_trials_as_hyperband():
    # Hyperband samples 81 + 34 + 15 + 8 + 5 = 143 configurations for R = 81, eta = 3
    (bracket,) = successive_halving_schedule(81, 3)
    assert bracket.s == 4
    assert [(r.n, r.r) for r in bracket.rungs] == [(143, 1), (47, 3), (15, 9), (5, 27), (1, 81)]
    (bracket,) = search_schedule("successive-halving", 9, 3, configurations=10)
    assert [(r.n, r.r) for r in bracket.rungs] == [(10, 1), (3, 3), (1, 9)]
    assert search_schedule("hyperband", 81, 3) == hyperband_schedule(81, 3)


@pytest.mark.parametrize(
    "algorithm, configurations, message",
    [
        ("successive-halving", 8, "needs at least 9 configurations (eta^2) for one to reach R"),
        ("hyperband", 20, "set it only with the successive-halving algorithm"),
        ("asha", None, "unknown algorithm 'asha'; choose one of: hyperband, successive-halving"),
    ],
)
def test_search_schedule_refuses(algorithm, configurations, message):
    with pytest.raises(RightsizeError, match=re.escape(message)):
        search_schedule(algorithm, 9, 3, configurations)


# -- the loop ---------------------------------------------------------------------------


def _trial(s: int, k: int) -> TrialSpec:
    return TrialSpec(f"s{s}-{k:03d}", 32, OptimizerSpec("sgd", 0.1), seed=k)


class ScriptedTrainer:
    """Loss of a trial = its score / resource trained; records every call."""

    def __init__(self, score):
        self.score, self.calls = score, []

    def train(self, states, groups, resource):
        self.calls.append(
            ([s.spec.trial_id for s in states], [s.step for s in states], groups, resource)
        )
        trained = {s.spec.trial_id: TrialState(s.spec, step=int(resource)) for s in states}
        losses = {s.spec.trial_id: self.score(s.spec) / resource for s in states}
        return trained, losses, 0.0


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1.0
        return self.now


def test_successive_halving_keeps_the_best_third_and_resumes():
    # R = 9, eta = 3; score = trial index, so trial 000 is best in every bracket
    trainer = ScriptedTrainer(lambda spec: 1 + int(spec.trial_id[-3:]))
    planned = []

    def plan(trials, s, i):
        planned.append((s, i, len(trials)))
        return [[t] for t in trials]

    band = Hyperband(
        9, 3, lambda s, n: [_trial(s, k) for k in range(n)], plan, trainer, clock=FakeClock()
    )
    result = band.run()
    ids = [call[0] for call in trainer.calls]
    assert ids[:3] == [
        [f"s2-{k:03d}" for k in range(9)],
        ["s2-000", "s2-001", "s2-002"],
        ["s2-000"],
    ]
    # promoted trials resume: they arrive with the steps of the previous rung
    assert trainer.calls[1][1] == [1, 1, 1] and trainer.calls[2][1] == [3]
    assert [c[3] for c in trainer.calls] == [1, 3, 9, 3, 9, 9]
    # Packed Hyperband: pack_opt is asked at every rung, with that rung's trials
    assert planned == [(2, 0, 9), (2, 1, 3), (2, 2, 1), (1, 0, 5), (1, 1, 1), (0, 0, 3)]
    # the smallest loss seen: trial 000 at r = 9 (1/9), first seen in bracket s=2
    assert result.best.trial_id == "s2-000" and result.best_loss == pytest.approx(1 / 9)
    assert result.best_resource == 9 and len(result.rungs) == 6
    assert result.wall_s > 0  # from the fake clock


def test_successive_halving_runs_one_bracket_and_promotes_a_third_of_the_whole_rung():
    # ASHA would promote early trials on partial rankings; this waits for the whole rung
    trainer = ScriptedTrainer(lambda spec: 100 - int(spec.trial_id[-3:]))  # the last is best
    schedule = successive_halving_schedule(9, 3, configurations=10)
    band = Hyperband(
        9, 3, lambda s, n: [_trial(s, k) for k in range(n)], lambda t, s, i: [t], trainer,
        clock=FakeClock(), schedule=schedule,
    )  # fmt: skip
    result = band.run()
    assert [(len(c[0]), c[3]) for c in trainer.calls] == [(10, 1), (3, 3), (1, 9)]
    assert trainer.calls[1][0] == ["s2-009", "s2-008", "s2-007"]
    assert result.best.trial_id == "s2-009" and result.best_resource == 9


def test_without_resume_every_rung_starts_from_scratch():
    trainer = ScriptedTrainer(lambda spec: 1.0)
    band = Hyperband(
        9,
        3,
        lambda s, n: [_trial(s, k) for k in range(n)],
        lambda t, s, i: [t],
        trainer,
        resume=False,
    )
    band.run()
    assert all(step == 0 for call in trainer.calls for step in call[1])


def test_diverged_trials_rank_last():
    # trial 000 diverges (NaN); it must not be promoted nor be the best
    def score(spec):
        return math.nan if spec.trial_id.endswith("000") else 1 + int(spec.trial_id[-3:])

    trainer = ScriptedTrainer(score)
    band = Hyperband(
        3, 3, lambda s, n: [_trial(s, k) for k in range(n)], lambda t, s, i: [t], trainer
    )
    result = band.run()
    assert trainer.calls[1][0] == ["s1-001"]  # s=1: 3 trials, keep 1: not the NaN one
    assert result.best.trial_id != "s1-000" and not math.isnan(result.best_loss)


# -- concurrent brackets ------------------------------------------------------------------


def _band(trainer, plan, concurrent, resume=True):
    return Hyperband(
        9, 3, lambda s, n: [_trial(s, k) for k in range(n)], plan, trainer, resume=resume,
        concurrent=concurrent,
    )  # fmt: skip


@pytest.mark.parametrize("score", [lambda spec: 1 + int(spec.trial_id[-3:]), lambda spec: 1.0])
def test_concurrent_brackets_train_phase_by_phase_and_find_the_same_best(score):
    # ties (score 1.0) must resolve as in the sequential run: the earliest seen there
    sequential = _band(ScriptedTrainer(score), lambda t, s, i: [t], False).run()
    trainer, planned = ScriptedTrainer(score), []

    def plan(trials, s, i):
        planned.append((s, i, len(trials)))
        return [trials]

    concurrent = _band(trainer, plan, True).run()
    # R = 9, eta = 3: phases end at r = 1, 3, 9; every bracket trains in every phase:
    # 9 + 5 + 3 trials to r=1, then 3 + 5 + 3 promoted or continuing to 3, then 1 + 1 + 3
    assert [(len(c[0]), c[3]) for c in trainer.calls] == [(17, 1), (11, 3), (5, 9)]
    assert [set(c[1]) for c in trainer.calls] == [{0}, {1}, {3}]  # all resume from one step
    assert planned == [(3, 0, 17), (3, 1, 11), (3, 2, 5)]  # key: one past the last bracket
    assert [(r.bracket, r.rung, r.n, r.r, r.losses) for r in concurrent.rungs] == [
        (r.bracket, r.rung, r.n, r.r, r.losses) for r in sequential.rungs
    ]
    assert (concurrent.best, concurrent.best_loss) == (sequential.best, sequential.best_loss)


def test_concurrent_brackets_need_resume():
    with pytest.raises(SpecError, match="concurrent brackets need resuming trials"):
        _band(ScriptedTrainer(lambda spec: 1.0), lambda t, s, i: [t], True, resume=False)
