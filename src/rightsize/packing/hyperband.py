"""Hyperband (Li et al., JMLR 2018, Algorithm 1) and Packed Hyperband (packing paper §5.1-§5.2).

Algorithm 1, with ``R`` the most resource one configuration may get and
``eta`` the fraction kept per round::

    s_max = floor(log_eta(R)),  B = (s_max + 1) R
    for s in s_max .. 0:                               # brackets
        n = ceil(B / R * eta^s / (s + 1)),  r = R eta^-s
        T = n sampled configurations
        for i in 0 .. s:                               # rungs (successive halving)
            n_i = floor(n eta^-i),  r_i = r eta^i
            L = validation loss of each t in T after training it with r_i
            T = the floor(n_i / eta) best of T
    return the configuration with the smallest loss seen

:func:`hyperband_schedule` is that table, pure. :class:`Hyperband` runs it:
a promoted trial resumes from its checkpoint and trains ``r_i - r_{i-1}``
more (``resume=False`` retrains from scratch, as Algorithm 1 is written), and
Packed Hyperband (§5.2) asks pack_opt at every rung which trials to train
together. Sampling, ranking and promotion are the same whatever the packing,
so every packing strategy visits the same configurations with the same seed;
packing changes only how long it takes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rightsize.core.errors import SpecError
from rightsize.packing.trial import TrialSpec, TrialState

# Integer parts of log_eta(R) and eta^-i products computed in floats land a hair
# below the integer (log(243, 3) = 4.999...); this much is treated as equal.
FLOAT_SLACK = 1e-9


@dataclass(frozen=True)
class Rung:
    """``n`` configurations trained with resource ``r`` each."""

    n: int
    r: float


@dataclass(frozen=True)
class Bracket:
    """One run of successive halving, ``s`` rounds of elimination."""

    s: int
    rungs: tuple[Rung, ...]


def hyperband_schedule(max_resource: float, eta: float) -> list[Bracket]:
    """Algorithm 1's brackets, ``s_max`` first.

    Raises:
        SpecError: ``eta <= 1`` or ``max_resource < 1``.
    """
    if not eta > 1:
        raise SpecError(f"eta must be > 1 (the fraction 1/eta of trials kept per rung), got {eta}")
    if not max_resource >= 1:
        raise SpecError(f"max resource R must be >= 1, got {max_resource}")
    s_max = int(math.floor(math.log(max_resource) / math.log(eta) + FLOAT_SLACK))
    budget = (s_max + 1) * max_resource
    brackets = []
    for s in range(s_max, -1, -1):
        n = int(math.ceil(budget / max_resource * eta**s / (s + 1) - FLOAT_SLACK))
        r = max_resource * eta**-s
        rungs = tuple(
            Rung(int(math.floor(n * eta**-i + FLOAT_SLACK)), _tidy(r * eta**i))
            for i in range(s + 1)
        )
        brackets.append(Bracket(s, rungs))
    return brackets


def _tidy(value: float) -> float:
    nearest = round(value)
    return float(nearest) if abs(value - nearest) < FLOAT_SLACK * max(1.0, value) else value


@dataclass
class RungRecord:
    """What happened at one rung: who trained together, their losses, the time it took."""

    bracket: int
    rung: int
    n: int
    r: float
    groups: list[list[str]]
    losses: dict[str, float]
    wall_s: float
    switch_s: float = 0.0


@dataclass
class SearchResult:
    """The best configuration seen and the record of every rung."""

    best: TrialSpec
    best_loss: float
    best_resource: float
    rungs: list[RungRecord] = field(default_factory=list)
    wall_s: float = 0.0


class RungTrainer(Protocol):
    """Trains the trials of one rung in the given groups (the mechanism Hyperband drives)."""

    def train(
        self, states: Sequence[TrialState], groups: list[list[str]], resource: float
    ) -> tuple[dict[str, TrialState], dict[str, float], float]:
        """Train each trial to ``resource``; return new states, validation losses, switch seconds."""
        ...


Sampler = Callable[[int, int], list[TrialSpec]]  # (bracket s, count) -> trials
Planner = Callable[[list[TrialSpec], int, int], list[list[TrialSpec]]]  # (trials, s, i) -> groups
Progress = Callable[[str], None]


class Hyperband:
    """Algorithm 1 over a trainer, with pack_opt's grouping at every rung.

    Args:
        max_resource: R.
        eta: the elimination factor.
        sample: draws a bracket's configurations as trials.
        plan: pack_opt for one rung (singleton groups for the original Hyperband).
        trainer: trains a rung's trials in its groups.
        resume: promoted trials continue from their checkpoint.
        clock: wall-clock seconds (a fake one in tests).
        progress: receives one line per rung.
    """

    def __init__(
        self,
        max_resource: float,
        eta: float,
        sample: Sampler,
        plan: Planner,
        trainer: RungTrainer,
        resume: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        progress: Progress = lambda _line: None,
    ) -> None:
        self.schedule = hyperband_schedule(max_resource, eta)
        self.eta = eta
        self._sample, self._plan, self._trainer = sample, plan, trainer
        self.resume, self._clock, self._progress = resume, clock, progress

    def run(self) -> SearchResult:
        """Run every bracket; the best is the smallest loss seen (ties: the earliest seen)."""
        start = self._clock()
        records: list[RungRecord] = []
        seen: list[tuple[float, int, TrialSpec, float]] = []
        for bracket in self.schedule:
            states = [TrialState(t) for t in self._sample(bracket.s, bracket.rungs[0].n)]
            for i, rung in enumerate(bracket.rungs):
                record, states = self._rung(bracket, i, states)
                records.append(record)
                for state in states:
                    loss = record.losses[state.spec.trial_id]
                    seen.append((_rank(loss), len(seen), state.spec, rung.r))
                states = self._promote(states, record.losses, rung.n)
        loss, _, spec, resource = min(seen, key=lambda item: item[:2])
        return SearchResult(spec, loss, resource, records, self._clock() - start)

    def _promote(
        self, states: list[TrialState], losses: dict[str, float], n: int
    ) -> list[TrialState]:
        """top_k: the floor(n_i / eta) trials with the smallest loss (ties by trial id)."""
        keep = int(math.floor(n / self.eta + FLOAT_SLACK))
        ranked = sorted(states, key=lambda s: (_rank(losses[s.spec.trial_id]), s.spec.trial_id))
        return ranked[:keep]

    def _rung(self, bracket: Bracket, i: int, states: list[TrialState]):
        rung = bracket.rungs[i]
        if not self.resume:
            states = [s.fresh() for s in states]
        groups = self._plan([s.spec for s in states], bracket.s, i)
        ids = [[t.trial_id for t in group] for group in groups]
        started = self._clock()
        trained, losses, switch_s = self._trainer.train(states, ids, rung.r)
        wall = self._clock() - started
        record = RungRecord(bracket.s, i, len(states), rung.r, ids, losses, wall, switch_s)
        self._progress(
            f"bracket s={bracket.s} rung {i}: {len(states)} trials x r={rung.r:g} in "
            f"{len(groups)} pack(s) of up to {max(len(g) for g in groups)} — {wall:.2f}s, "
            f"best loss {min(losses.values(), key=_rank):.4f}"
        )
        return record, [trained[s.spec.trial_id] for s in states]


def _rank(loss: float) -> float:
    """Losses for ranking: a diverged trial (NaN) ranks last."""
    return math.inf if math.isnan(loss) else loss
