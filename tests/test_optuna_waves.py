"""Asynchronous successive halving in packed waves on a real Optuna study (issue 41 items 1, 3).

The promotion rule by hand-computed tables; then MLP-3 on digits, R = 9, eta = 3 (rungs
at 1, 3, 9 units), waves of 9 out of 18 trials, the study's seeded TPE proposing.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState as OptunaState  # noqa: E402
from tests.test_optuna_pack import DISTRIBUTIONS, PACKED, _alone_losses  # noqa: E402
from tests.test_packing_probe import one_thread  # noqa: E402, F401 (a fixture)

from rightsize.core.errors import SpecError  # noqa: E402
from rightsize.integrations.optuna import make_sampler  # noqa: E402
from rightsize.integrations.optuna_waves import (  # noqa: E402
    WAVE_ATTR,
    WaveSettings,
    optimize_waves,
    promoted,
    rung_units,
)
from rightsize.packing.trial import trial_seed  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize(
    ("wave", "history", "expected"),
    [
        # the first wave alone: 6 losses, floor(6/3) = 2 go on, the two smallest
        ({"a": 0.5, "b": 0.1, "c": 0.9, "d": 0.2, "e": 0.7, "f": 0.3}, [], ["b", "d"]),
        # an earlier wave's 0.05 and 0.15 take both places of floor(6/3): none of three goes on
        ({"a": 0.2, "b": 0.3, "c": 0.4}, [0.05, 0.15, 0.9], []),
        # 9 losses, 3 places: 0.05 (earlier) and this wave's 0.06 and 0.08
        ({"a": 0.08, "b": 0.5, "c": 0.06}, [0.05, 0.1, 0.9, 0.7, 0.6, 0.4], ["a", "c"]),
        # a tie at the cutoff goes to the earlier wave: 0.1 (earlier) keeps the one place
        ({"a": 0.1, "b": 0.3}, [0.1], []),
        # within a wave, a tie goes to the earlier trial
        ({"a": 0.1, "b": 0.1, "c": 0.1}, [], ["a"]),
        # a diverged loss never goes on, even with places left
        ({"a": math.nan, "b": math.nan, "c": math.nan}, [], []),
        # fewer losses than eta: no place yet
        ({"a": 0.1, "b": 0.2}, [], []),
    ],
)
def test_asha_promotes_the_best_floor_n_over_eta_of_every_loss_at_the_rung(wave, history, expected):
    assert promoted(wave, history + list(wave.values()), 3) == expected


def test_rung_units_and_bad_settings():
    assert rung_units(81, 3, 1) == [1, 3, 9, 27, 81]
    assert rung_units(81, 3, 3) == [3, 9, 27, 81]
    assert rung_units(9, 3, 2) == [2, 6, 9]
    with pytest.raises(SpecError, match="whole R"):
        rung_units(10.5, 3, 1)
    with pytest.raises(SpecError, match="above R"):
        rung_units(9, 3, 27)
    with pytest.raises(SpecError, match="wave"):
        WaveSettings(wave=0)


@pytest.mark.parametrize(("overlap", "workers"), [(True, 1), (False, 1), (True, 2)])
def test_waves_report_every_rung_promote_by_rung_and_match_each_trial_alone(overlap, workers):
    study = optuna.create_study(sampler=make_sampler("tpe", 0))
    lines: list[str] = []
    ran = optimize_waves(
        study, DISTRIBUTIONS, replace(PACKED, workers=workers),
        WaveSettings(wave=9, configurations=18, overlap=overlap), progress=lines.append,
    )  # fmt: skip

    trials = study.trials
    assert ran.asked == 18 and len(trials) == 18
    assert [t.user_attrs[WAVE_ATTR]["wave"] for t in trials] == [0] * 9 + [1] * 9
    assert all(t.user_attrs[WAVE_ATTR]["seed"] == trial_seed(PACKED.seed, t.number) for t in trials)
    # every trial reports each rung it trained to; none is left running
    history: dict[int, list[float]] = {1: [], 3: []}
    for w in (0, 1):
        wave = trials[9 * w : 9 * w + 9]
        for units, nxt in ((1, 3), (3, 9)):
            at = {
                t.number: t.intermediate_values[units]
                for t in wave
                if units in t.intermediate_values
            }
            history[units] += list(at.values())
            # ASHA's rule over all losses at the rung so far decides who reached the next one
            going = promoted(at, history[units], 3)
            assert [t.number for t in wave if nxt in t.intermediate_values] == going
    for t in trials:
        assert t.state in (OptunaState.PRUNED, OptunaState.COMPLETE)
        assert (t.state == OptunaState.COMPLETE) == (9 in t.intermediate_values)
        if t.state == OptunaState.COMPLETE:
            assert t.value == t.intermediate_values[9]
    assert sum(t.state == OptunaState.COMPLETE for t in trials) >= 1
    assert any(line.startswith("wave 0 rung 0: 9 trials x r=1") for line in lines)
    # overlapped, wave 1's first rung trains in the step of wave 0's second
    order = [line.split(":")[0] for line in lines if line.startswith("wave ")]
    assert order[:3] == (
        ["wave 0 rung 0", "wave 0 rung 1", "wave 1 rung 0"]
        if overlap
        else ["wave 0 rung 0", "wave 0 rung 1", "wave 0 rung 2"]
    )
    # the best: trained to R, the smallest loss there
    complete = [t for t in trials if t.state == OptunaState.COMPLETE]
    assert ran.result.best_loss == min(t.value for t in complete) and ran.result.best_resource == 9
    # packed, bit for bit as alone: a trial of each wave that went furthest
    for w in (0, 1):
        furthest = max(
            trials[9 * w : 9 * w + 9], key=lambda t: (len(t.intermediate_values), -t.number)
        )
        assert furthest.intermediate_values == _alone_losses(furthest)


def test_waves_refuse_a_maximizing_study():
    study = optuna.create_study(direction="maximize")
    with pytest.raises(SpecError, match="minimize"):
        optimize_waves(study, DISTRIBUTIONS, PACKED, WaveSettings(wave=2, configurations=2))
