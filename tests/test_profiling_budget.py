"""The profile's time budget (profiling/budget.py): a hard ceiling counted in steps.

The clock is a fake one that only the fake workload's steps advance (0.1 s per sample
of a forward pass), so the counts below are exact and no assertion reads a real clock.
"""

import pytest
import torch

from rightsize.profiling.budget import (
    RoundBudget,
    TimeBudget,
    announce,
    budget_step_s,
)
from rightsize.profiling.noise import steady_runs
from rightsize.profiling.timing import StepRuns, time_interleaved


class StepClock:
    """Seconds that pass only when a fake step runs."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


class CountingWorkload:
    """A step at batch ``b`` costs ``0.1 * b`` seconds of the fake clock (in its forward)."""

    def __init__(self, clock: StepClock) -> None:
        self.clock, self.steps = clock, 0

    def loss(self, model, batch):
        inputs, _ = batch
        self.steps += 1
        self.clock.t += 0.1 * inputs.shape[0]
        return model(inputs).sum()


def _timing(budget_s, repeats=10, warmup=2, batches=(1, 10, 20)):
    clock = StepClock()
    workload = CountingWorkload(clock)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    examples = {b: (torch.ones(b, 2), torch.zeros(b)) for b in batches}
    budget = TimeBudget(budget_s, clock.now)
    runs = time_interleaved(workload, model, optimizer, examples, clock, warmup, repeats,
                            budget=RoundBudget(budget, tail_steps=0))  # fmt: skip
    return runs, workload.steps, budget


def test_the_rounds_stop_where_the_next_would_not_fit():
    # one step of each batch: 0.1 + 1 + 2 = 3.1 s; warm-up 2 of each: 6.2 s; a round
    # (an untimed and a timed step of each): 6.2 s. In 30 s: 6.2 + 3 rounds = 24.8 s,
    # a fourth would end at 31 s.
    runs, steps, budget = _timing(30.0)
    assert [len(r.total_s) for r in runs.values()] == [3, 3, 3]
    assert steps == 3 * (2 + 2 * 3)
    assert budget.spent_s() == pytest.approx(24.8) and budget.spent_s() <= 30.0
    assert budget.cuts == ["timed 3 of 10 rounds of batch 1, 10, 20 (the next did not fit "
                           "in the budget)"]  # fmt: skip


def test_the_first_round_always_runs_and_no_budget_runs_them_all():
    runs, steps, budget = _timing(1.0)  # spent in the warm-up already
    assert [len(r.total_s) for r in runs.values()] == [1, 1, 1] and steps == 3 * (2 + 2)
    assert "timed 1 of 10 rounds" in budget.cuts[0]
    runs, steps, budget = _timing(None)
    assert [len(r.total_s) for r in runs.values()] == [10, 10, 10] and steps == 3 * 22
    assert budget.cuts == [] and not budget.bounded


def test_rounds_are_priced_by_what_must_follow_them():
    clock = StepClock()
    budget = TimeBudget(20.0, clock.now)
    one_each = {1: 1.0, 2: 2.0}  # 3 s a step of each
    assert RoundBudget(budget, tail_steps=0).next_round_fits(one_each)  # 6 s
    assert RoundBudget(budget, tail_steps=4).next_round_fits(one_each)  # 18 s
    assert not RoundBudget(budget, tail_steps=5).next_round_fits(one_each)  # 21 s
    clock.t = 15.0
    assert budget.left_s() == 5.0 and not budget.affords(6.0)
    assert budget.record() == {"seconds": 20.0, "spent_s": 15.0, "cuts": []}


def test_a_retiming_the_budget_refuses_is_not_made():
    noisy = StepRuns([0.1, 0.5, 0.1], [0.2, 0.2, 0.9], [0.01] * 3)
    calm = StepRuns([0.1] * 3, [0.2] * 3, [0.01] * 3)
    again = []
    runs, tries = steady_runs(lambda b: again.append(b) or {x: calm for x in b},
                              {1: calm, 2: noisy}, affords=lambda _b: False)  # fmt: skip
    assert again == [] and tries == 0 and runs[2] is noisy
    runs, tries = steady_runs(lambda b: again.append(b) or {x: calm for x in b},
                              {1: calm, 2: noisy})  # fmt: skip
    assert again == [[2]] and runs[2] is calm


def test_the_search_step_bound_leaves_the_timing_phase_its_share():
    # 60% of 90 s for 2 + 2*3 + 1 = 9 steps of Srift's batches (2 steps at B_max a round)
    assert budget_step_s(90.0, 2.0, warmup=2, repeats=5) == pytest.approx(54 / 18)
    assert budget_step_s(90.0, 2.0, warmup=2, repeats=1) == pytest.approx(54 / 10)


def test_the_plan_is_said_up_front():
    line = announce("ResNet-18", 90.0, "srift", (), 5)
    assert line.startswith("profiling ResNet-18: up to 90 s — 4 batches (1, B_max/3,")
    assert "--budget-s" in line and "up to 5 timing rounds" in line
    assert "no time limit" in announce("x", None, "dense", (48,), 3)
    assert "powers of two" in announce("x", None, "dense", (48,), 3)
    assert "batch 48" in announce("x", None, "dense", (48,), 3)


@pytest.mark.parametrize("value", ["0", "-5", "abc", "inf", "nan"])
def test_a_bad_budget_is_one_line_exit_2(capsys, tmp_path, value):
    from rightsize.cli.main import main

    out = tmp_path / "p.json"
    assert main(["profile", "mlp3", "--budget-s", value, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budget-s" in err[0] and not out.exists()


def test_plan_says_it_will_profile_how_long_and_where():
    from pathlib import Path

    from rightsize.cli.profiles import will_profile

    line = will_profile("ResNet-18", Path("profiles/resnet18-synthetic-imagenet-cpu.json"), 90.0)
    assert "profiling it on this CPU first, up to 90 s" in line
    assert "profiles/resnet18-synthetic-imagenet-cpu.json" in line and "next plan reuses" in line


def test_a_peak_between_probes_is_read_off_their_line():
    from rightsize.profiling.budget import interpolated_peak

    probes = {1: 100, 4: 400, 8: 1000}
    assert interpolated_peak(probes, 6) == 700 and interpolated_peak(probes, 4) == 400
    assert interpolated_peak(probes, 2) == 200
    assert interpolated_peak(probes, 9) is None  # never extrapolated: measured instead
