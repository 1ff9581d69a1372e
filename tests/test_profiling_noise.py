"""Noisy timings re-measured, falling segments found, and both recorded; progress estimates."""

import pytest

from profile_factory import linear_profile
from rightsize.profiling.noise import falling_segments, noisy_batches, steady_runs, suspects
from rightsize.profiling.progress import ProgressClock, TimingProgress, step_seconds, timing_seconds
from rightsize.profiling.timing import StepRuns


def runs_of(*totals: float) -> StepRuns:
    """Runs whose fwd+bwd times are ``totals`` (all in forward, for simplicity)."""
    return StepRuns(list(totals), [0.0] * len(totals), [0.0] * len(totals))


STEADY = runs_of(1.0, 1.0, 1.0)


def test_noisy_batches_are_those_above_the_threshold():
    # CV of (1, 2, 3) is 0.5; of (1, 1.1, 1.0) about 0.055
    runs = {1: runs_of(1.0, 2.0, 3.0), 8: runs_of(1.0, 1.1, 1.0)}
    assert noisy_batches(runs, 0.1) == [1]
    assert noisy_batches(runs, 0.6) == []


def test_falling_segments_and_their_ends_are_suspects():
    # medians 1.0 at 1, 3.0 at 8, 2.0 at 16: the segment 8 -> 16 falls
    assert falling_segments([(16, 2.0), (1, 1.0), (8, 3.0)]) == [(8, 16)]
    runs = {1: runs_of(1.0, 1.0), 8: runs_of(3.0, 3.0), 16: runs_of(2.0, 2.0)}
    assert suspects(runs, 0.1) == [8, 16]


def test_suspects_are_timed_again_and_the_steadier_runs_kept():
    calls = []

    def time_again(batches):
        calls.append(batches)
        return {b: runs_of(2.0, 2.0, 2.0) for b in batches}

    runs = {1: STEADY, 8: runs_of(1.0, 5.0, 9.0)}  # batch 8: CV 0.8
    kept, retimes = steady_runs(time_again, runs, noisy_cv=0.1, retries=2)
    assert calls == [[8]] and retimes == 1  # steady after one try: no second
    assert kept[8].total_s == [2.0, 2.0, 2.0] and kept[1] is STEADY


def test_retries_are_bounded_and_a_worse_attempt_is_not_kept():
    calls = []
    noisy = runs_of(1.0, 3.0)
    noisier = runs_of(1.0, 9.0)

    def time_again(batches):
        calls.append(batches)
        return {b: noisier for b in batches}

    kept, retimes = steady_runs(time_again, {4: noisy}, noisy_cv=0.1, retries=2)
    assert len(calls) == 2 and retimes == 2
    assert kept[4] is noisy
    assert noisy_batches(kept, 0.1) == [4]  # still noisy: the profile records it


def test_profile_says_what_is_left_for_predict_and_plan():
    profile = linear_profile().model_copy(
        update={"noisy_batches": (85,), "falling_segments": ((171, 256),),
                "settings": {"noisy_cv": 0.1}}
    )  # fmt: skip
    lines = profile.timing_warnings()
    assert len(lines) == 2
    assert "noisy timings at batch 85" in lines[0] and "10%" in lines[0]
    assert "171->256" in lines[1] and "negative slope" in lines[1]
    assert linear_profile().timing_warnings() == []


def test_step_time_estimates_follow_the_measured_line():
    timed = [(1, 0.1), (64, 1.36)]  # 0.08 s + 0.02 s/sample
    assert step_seconds(timed, 32) == pytest.approx(0.72)
    assert step_seconds(timed, 128) == pytest.approx(2.64)  # extended past the last
    assert step_seconds([(10, 1.0)], 20) == pytest.approx(2.0)
    assert step_seconds([], 20) is None
    # 15 steps at batches 1 and 64
    assert timing_seconds([1, 64], 15, timed) == pytest.approx(15 * (0.1 + 1.36))


def test_progress_lines_carry_elapsed_and_time_left():
    now = [100.0]
    lines: list[str] = []
    clock = ProgressClock(lines.append, clock=lambda: now[0])
    # warmup 1, 2 rounds, 1 hook pass: 6 steps per batch; after round 1, 3 of 6 are done
    report = TimingProgress(clock, warmup=1, repeats=2, hook_repeats=1, batches=2)
    now[0] = 130.0
    report.round_done(1)
    assert lines[-1] == "[30s elapsed, about 30s left] timing: round 1 of 2"
    now[0] = 170.0
    report.batch_done(1, 0.5)  # 5.5 of 6 steps done in 70 s
    assert lines[-1].startswith("[1m10s elapsed, about 6.36s left]")
