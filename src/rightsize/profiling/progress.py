"""Progress of a profile: the phase, the batch, the time spent and an estimate of the time left.

Profiling on a CPU takes minutes, and a user who sees no end leaves or kills
it. The estimate comes from what was already measured: step time is close to
linear in the batch (Srift §4.1), so the steps still to run are priced with the
line through the steps timed so far. It is an estimate ("about"), printed from
the first timed step on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rightsize.core.units import format_duration

Emit = Callable[[str], None]


def step_seconds(timed: Sequence[tuple[int, float]], batch: float) -> float | None:
    """Predicted seconds of one step at ``batch`` from ``(batch, seconds)`` measurements.

    Between two measured batches: the line through them; beyond the measured
    range: the line through the two nearest (one measurement: proportional). None
    with no measurement.
    """
    points = sorted(timed)
    if not points:
        return None
    if len(points) == 1:
        b0, t0 = points[0]
        return t0 * batch / b0
    after = next((i for i, (b, _) in enumerate(points) if b >= batch), len(points) - 1)
    (b1, t1), (b2, t2) = points[max(0, after - 1)], points[max(1, after)]
    if b2 == b1:
        return t2
    return max(min(t1, t2), t1 + (t2 - t1) * (batch - b1) / (b2 - b1))


def timing_seconds(
    batches: Sequence[int], steps_per_batch: int, timed: Sequence[tuple[int, float]]
) -> float | None:
    """Predicted seconds of the timing phase: ``steps_per_batch`` steps of every batch."""
    predicted = [step_seconds(timed, b) for b in batches]
    if any(p is None for p in predicted):
        return None
    return steps_per_batch * sum(p for p in predicted if p is not None)


class ProgressClock:
    """Writes progress lines prefixed with the elapsed time and, when known, the time left."""

    def __init__(self, emit: Emit, clock: Callable[[], float] = time.monotonic) -> None:
        self.emit, self.clock = emit, clock
        self.start = clock()

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.start

    def say(self, message: str, left_s: float | None = None) -> None:
        left = f", about {format_duration(left_s)} left" if left_s is not None else ""
        self.emit(f"[{format_duration(self.elapsed_s)} elapsed{left}] {message}")


class TimingProgress:
    """Progress of the timing phase: the share of its steps done prices the rest.

    Every sampled batch runs ``warmup`` steps, then two steps per round (one
    untimed after the switch, one timed), then ``hook_repeats`` instrumented
    passes; the rounds interleave the batches, so the share of steps done is the
    share of the time spent, whatever the batches' own times.
    """

    def __init__(
        self, clock: ProgressClock, warmup: int, repeats: int, hook_repeats: int, batches: int
    ) -> None:
        self.clock, self.warmup, self.repeats, self.hook_repeats = (
            clock,
            warmup,
            repeats,
            hook_repeats,
        )
        self.steps = warmup + 2 * repeats + hook_repeats
        self.batches, self.hooks_done = batches, 0
        self.started = clock.elapsed_s

    def start(
        self, batches: Sequence[int], timed: Sequence[tuple[int, float]], budget=None
    ) -> None:
        """``budget``: the profile's TimeBudget, whose time left is said (profiling/budget.py)."""
        self.started = self.clock.elapsed_s
        left = timing_seconds(batches, self.steps, timed) if len(timed) > 1 else None
        rounds = f"{self.repeats} rounds"
        if budget is not None and budget.bounded:
            rounds = f"up to {rounds}, in the {format_duration(max(0.0, budget.left_s()))} " \
                     "of the budget left"  # fmt: skip
        self.clock.say(f"timing batches {', '.join(map(str, batches))} ({rounds})", left)

    def left_s(self, steps_done: float) -> float:
        spent = self.clock.elapsed_s - self.started
        return spent * (self.steps - steps_done) / steps_done

    def round_done(self, rounds: int) -> None:
        done = self.warmup + 2 * rounds
        self.clock.say(f"timing: round {rounds} of {self.repeats}", self.left_s(done))

    def retiming(self, attempt: int, batches: list[int]) -> None:
        self.clock.say(
            f"timing again (noisy or falling times), try {attempt}: "
            f"batch {', '.join(map(str, batches))}"
        )

    def batch_done(self, batch: int, total_s: float) -> None:
        self.hooks_done += 1
        done = self.steps - self.hook_repeats * (1 - self.hooks_done / self.batches)
        self.clock.say(f"  batch {batch}: {format_duration(total_s)} per step", self.left_s(done))
