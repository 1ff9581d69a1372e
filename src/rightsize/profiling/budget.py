"""A profile's total time budget: what the profiler may spend, and what it cut to stay in it.

A ResNet-18 profile took 3.5 min on a quiet 2-core host and 14 min on a busy one,
and ``plan --workload`` profiled silently for 12 min. The budget bounds the whole
profile in three places, each of which decides from steps it has already timed:

1. **The B_max search** stops at a step time the timing phase can afford
   (:func:`budget_step_s`): Srift's four batches ``1, B/3, 2B/3, B`` cost about
   two steps at ``B`` per round, and the timing phase gets ``TIMING_SHARE`` of
   the budget for at least ``warmup + 2·MIN_ROUNDS + 1`` steps of each batch —
   but never below batch ``BUDGET_TIME_FLOOR``.
2. **The timing rounds** (``timing.time_interleaved``): before each round after
   the first, the round's cost — priced by the warm-up steps, then by the last
   round — plus what must still follow (gradient-ready passes, static costs)
   must fit in what is left; otherwise the rounds stop there. The first round
   always runs: a profile needs one time per batch. So the timed steps never
   exceed ``repeats`` per batch, and beyond the first round never a round the
   budget could not pay for when it started.
3. **Re-timing noisy batches** and the **gradient-ready passes** run only when
   what is left pays for them (else one pass).

Everything cut is kept as a note (:attr:`TimeBudget.cuts`), said as a warning
and stored in the profile's ``settings["budget"]``: never a silent overrun.
The clock is the profiler's stopwatch, so tests count steps with a fake one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: The share of the budget the timing phase is sized for; the search, the model's build
#: and the static costs (FLOP counting, activation bytes) get the rest.
TIMING_SHARE = 0.6
#: Rounds the search's step bound leaves room for (the requested repeats may be fewer).
MIN_ROUNDS = 3
#: Srift's batches 1, B/3, 2B/3, B cost about this many steps at B per round (1/3+2/3+1).
SRIFT_ROUND_STEPS = 2.0
#: The budget's step bound never stops the B_max search below this batch: Srift's
#: batches are then 1, 3, 5, 8 (a busy host's slow steps would otherwise leave B_max at 1,
#: a profile of one batch); the rounds are cut instead, and an overrun said.
BUDGET_TIME_FLOOR = 8
#: The default total budget of ``rightsize profile`` and of a quick profile, seconds.
DEFAULT_BUDGET_S = 90.0


def budget_step_s(
    budget_s: float, batches_per_bmax: float, warmup: int, repeats: int
) -> float:
    """The longest step at B_max whose timing phase fits in the budget's timing share.

    Args:
        batches_per_bmax: the sampled batches' sum over B_max (about 2 for Srift's four).
    """
    steps = warmup + 2 * min(repeats, MIN_ROUNDS) + 1
    return TIMING_SHARE * budget_s / (steps * batches_per_bmax)


@dataclass
class TimeBudget:
    """``seconds`` from the first reading of ``clock`` (None: unbounded), and what was cut."""

    seconds: float | None
    clock: Callable[[], float]
    start: float = field(init=False)
    cuts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.start = self.clock()

    @property
    def bounded(self) -> bool:
        return self.seconds is not None

    def spent_s(self) -> float:
        return self.clock() - self.start

    def left_s(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.spent_s()

    def affords(self, seconds: float) -> bool:
        return seconds <= self.left_s()

    def cut(self, note: str) -> None:
        self.cuts.append(note)

    def record(self) -> dict:
        """What the profile keeps of it (``settings["budget"]``)."""
        return {"seconds": self.seconds, "spent_s": round(self.spent_s(), 3),
                "cuts": list(self.cuts)}  # fmt: skip


@dataclass
class RoundBudget:
    """The timing rounds' side of the budget: may another round start?

    ``tail_steps``: steps of every batch that must still follow the rounds (the
    gradient-ready passes and the static costs), priced like the rounds' steps.
    """

    budget: TimeBudget
    tail_steps: float

    def next_round_fits(self, step_s: dict[int, float]) -> bool:
        """``step_s``: the latest seconds of one step at each batch."""
        one_each = sum(step_s.values())
        return self.budget.affords((2 + self.tail_steps) * one_each)

    def stopped(self, done: int, wanted: int, batches: Sequence[int]) -> None:
        self.budget.cut(
            f"timed {done} of {wanted} rounds of batch {', '.join(map(str, batches))} "
            "(the next did not fit in the budget)"
        )


def announce(label: str, budget_s: float | None, sampling: str, extra_batches: Sequence[int],
             repeats: int) -> str:  # fmt: skip
    """The profile's plan, said before it starts: how long at most, and what it times."""
    batches = "4 batches (1, B_max/3, 2·B_max/3, B_max)"
    if sampling == "dense":
        batches = "Srift's 4 batches and the powers of two between them"
    if extra_batches:
        batches += f" and batch {', '.join(map(str, extra_batches))}"
    limit = "no time limit" if budget_s is None else f"up to {budget_s:g} s"
    return (f"profiling {label}: {limit} — {batches}, up to {repeats} timing rounds, after "
            "the B_max search; --budget-s, --sampling dense and --extra-batches change it")  # fmt: skip


def interpolated_peak(probes: dict[int, int], batch: int) -> int | None:
    """A step's peak bytes at ``batch`` on the line between the search's nearest probes
    below and above it (memory is close to linear in the batch, Srift §4.1); None outside
    the probed range. A budget spent saves the step that measuring it would take."""
    below = max((b for b in probes if b <= batch), default=None)
    above = min((b for b in probes if b >= batch), default=None)
    if below is None or above is None:
        return None
    if below == above:
        return probes[below]
    share = (batch - below) / (above - below)
    return round(probes[below] + share * (probes[above] - probes[below]))
