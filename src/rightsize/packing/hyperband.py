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

Concurrent brackets (``concurrent=True``, beyond both papers): Algorithm 1
runs its brackets one after another, so a bracket's last rungs (one to five
trials) train with nobody to pack with. Every bracket's rungs end on the same
few resources (R eta^-k), so the brackets can run side by side instead: the
resource axis is cut at every rung end into *phases*, and in each phase every
bracket's current trials (all resuming from the same step) are packed
together by pack_opt. Sampling, ranking and promotion stay per bracket, so the
trials, their losses and the best found are those of the sequential run.

Successive halving (``successive_halving_schedule``; Jamieson & Talwalkar,
AISTATS 2016) is one bracket of the same loop, Hyperband's most aggressive
(``s = s_max``), over ``n`` configurations: the algorithm ASHA (Li et al.,
MLSys 2020) runs asynchronously. ASHA promotes a trial as soon as it is in the
top ``1/eta`` of the rung *so far*, so that no worker waits at a rung's end,
and pays for it in trials promoted that a finished rung would have dropped.
With packing, a rung's trials train together anyway, so the synchronous rule
(promote the best ``floor(n_i / eta)`` of the whole rung) costs little waiting
and trains only the trial-steps Algorithm 1's bracket trains.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rightsize.core.errors import SpecError, choose
from rightsize.packing.choices import Algorithm
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


def successive_halving_schedule(
    max_resource: float, eta: float, configurations: int | None = None
) -> list[Bracket]:
    """One bracket: ``configurations`` trials from ``r = R eta^-s_max`` to ``R``.

    ``configurations`` defaults to as many as Hyperband samples over all its brackets
    (143 for R = 81, eta = 3), so the two algorithms see the same number of trials.

    Raises:
        SpecError: bad ``eta`` or ``R`` (as :func:`hyperband_schedule`), or too few
            configurations for one to reach ``R`` (fewer than ``eta^s_max``).
    """
    brackets = hyperband_schedule(max_resource, eta)
    top = brackets[0]
    n = sampled(brackets) if configurations is None else configurations
    fewest = int(math.ceil(eta**top.s - FLOAT_SLACK))
    if n < fewest:
        raise SpecError(
            f"successive halving with R={max_resource:g} and eta={eta:g} needs at least "
            f"{fewest} configurations (eta^{top.s}) for one to reach R, got {n}"
        )
    rungs = tuple(
        Rung(int(math.floor(n * eta**-i + FLOAT_SLACK)), rung.r) for i, rung in enumerate(top.rungs)
    )
    return [Bracket(top.s, rungs)]


def sampled(schedule: Sequence[Bracket]) -> int:
    """How many configurations ``schedule``'s brackets sample in all."""
    return sum(bracket.rungs[0].n for bracket in schedule)


def search_schedule(
    algorithm: Algorithm | str, max_resource: float, eta: float,
    configurations: int | None = None,
) -> list[Bracket]:
    """The brackets ``algorithm`` runs.

    Raises:
        SpecError: an unknown algorithm, ``configurations`` given to Hyperband (its
            brackets fix their own), or what the schedule itself refuses.
    """
    algorithm = choose(Algorithm, algorithm, "algorithm")
    if algorithm is Algorithm.HYPERBAND:
        if configurations is not None:
            raise SpecError(
                "configurations: Hyperband's brackets fix how many trials they sample; "
                "set it only with the successive-halving algorithm"
            )
        return hyperband_schedule(max_resource, eta)
    return successive_halving_schedule(max_resource, eta, configurations)


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
    specs: dict[str, TrialSpec] = field(default_factory=dict)


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
# (a rung's record, the ids going on to the bracket's next rung: none after its last)
RungObserver = Callable[[RungRecord, list[str]], None]
SeenKey = tuple[int, int, int]  # (bracket position, rung, trial position): the sequential order


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
        concurrent: run the brackets side by side, packing across them (needs
            ``resume``: a phase's trials must all stand on its first step).
        observe: told of every rung once its trials are ranked, with the ids
            promoted (the Optuna driver reports and prunes trials here).
        schedule: the brackets to run (default: Algorithm 1's for ``max_resource``
            and ``eta``; :func:`successive_halving_schedule` for one bracket).
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
        concurrent: bool = False,
        observe: RungObserver = lambda _record, _promoted: None,
        schedule: Sequence[Bracket] | None = None,
    ) -> None:
        if concurrent and not resume:
            raise SpecError(
                "concurrent brackets need resuming trials (a phase packs trials that all "
                "continue from one step): drop --no-resume or --concurrent-brackets"
            )
        self.schedule = (
            hyperband_schedule(max_resource, eta) if schedule is None else list(schedule)
        )
        self.concurrent = concurrent
        self.eta = eta
        self._sample, self._plan, self._trainer = sample, plan, trainer
        self.resume, self._clock, self._progress = resume, clock, progress
        self._observe = observe

    def plan(self, trials: list[TrialSpec], s: int, i: int) -> list[list[TrialSpec]]:
        """pack_opt's groups for ``trials`` at bracket ``s``'s rung ``i`` (the search's planner;
        the Optuna driver's packed waves plan with it too)."""
        return self._plan(trials, s, i)

    def run(self, brackets: Collection[int] | None = None) -> SearchResult:
        """Run every bracket, or those whose ``s`` is in ``brackets`` (a resumed search
        skips the finished ones); the best is the smallest loss seen (ties: the earliest
        seen, in the sequential order, whether or not the brackets ran concurrently).

        Raises:
            ValueError: ``brackets`` selects none of the schedule's brackets.
        """
        start = self._clock()
        chosen = [b for b in self.schedule if brackets is None or b.s in brackets]
        if not chosen:
            raise ValueError(f"no bracket to run: {sorted(brackets or [])} selects none")
        records = self._run_concurrent(chosen) if self.concurrent else self._run_sequential(chosen)
        loss, spec, resource = best_seen(records, self._bracket_position())
        return SearchResult(spec, loss, resource, records, self._clock() - start)

    def _run_sequential(self, schedule: list[Bracket]) -> list[RungRecord]:
        records: list[RungRecord] = []
        for bracket in schedule:
            states = [TrialState(t) for t in self._sample(bracket.s, bracket.rungs[0].n)]
            for i, rung in enumerate(bracket.rungs):
                record, states = self._rung(bracket, i, states)
                records.append(record)
                states = self._promote(states, record.losses, rung.n)
                self._tell(bracket, record, states)
        return records

    def _tell(self, bracket: Bracket, record: RungRecord, promoted: list[TrialState]) -> None:
        last = record.rung == len(bracket.rungs) - 1
        self._observe(record, [] if last else [s.spec.trial_id for s in promoted])

    def _run_concurrent(self, schedule: list[Bracket]) -> list[RungRecord]:
        """Every bracket at once, phase by phase; a phase ends where some rung ends."""
        runs = [
            _BracketRun(b, [TrialState(t) for t in self._sample(b.s, b.rungs[0].n)])
            for b in schedule
        ]
        records: list[RungRecord] = []
        for phase, end in enumerate(sorted({r.r for b in schedule for r in b.rungs})):
            runs = [run for run in runs if run.states]
            if not runs:
                break
            trained, losses, packs, wall, switch_s = self._phase(runs, phase, end)
            for run in runs:
                record = run.advance(trained, losses, packs, wall, switch_s, end)
                if record is not None:
                    records.append(record)
                    run.states = self._promote(run.states, record.losses, record.n)
                    self._tell(run.bracket, record, run.states)
        position = self._bracket_position()
        return sorted(records, key=lambda r: (position[r.bracket], r.rung))

    def _bracket_position(self) -> dict[int, int]:
        """Bracket ``s`` -> its place in Algorithm 1's order (``s_max`` first)."""
        return {b.s: k for k, b in enumerate(self.schedule)}

    def _phase(self, runs: list[_BracketRun], phase: int, end: float):
        """Train every bracket's current trials to ``end``, packed together."""
        trials = [state for run in runs for state in run.states]
        # pack_opt's random numbers for a phase: keyed one past the last bracket
        groups = self._plan([t.spec for t in trials], len(self.schedule), phase)
        packs = [[t.trial_id for t in group] for group in groups]
        started = self._clock()
        trained, losses, switch_s = self._trainer.train(trials, packs, end)
        wall = self._clock() - started
        self._progress(
            f"phase {phase} to r={end:g}: {len(trials)} trials of {len(runs)} brackets in "
            f"{len(groups)} pack(s) of up to {max(len(g) for g in groups)} — {wall:.2f}s"
        )
        return trained, losses, packs, wall, switch_s

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
        specs = {s.spec.trial_id: s.spec for s in states}
        losses = {s.spec.trial_id: losses[s.spec.trial_id] for s in states}  # in trial order
        record = RungRecord(bracket.s, i, len(states), rung.r, ids, losses, wall, switch_s, specs)
        self._progress(
            f"bracket s={bracket.s} rung {i}: {len(states)} trials x r={rung.r:g} in "
            f"{len(groups)} pack(s) of up to {max(len(g) for g in groups)} — {wall:.2f}s, "
            f"best loss {min(losses.values(), key=_rank):.4f}"
        )
        return record, [trained[s.spec.trial_id] for s in states]


@dataclass
class _BracketRun:
    """A bracket during concurrent phases: its current rung, trials and the rung's costs so far."""

    bracket: Bracket
    states: list[TrialState]
    rung: int = 0
    wall_s: float = 0.0
    switch_s: float = 0.0
    packs: list[list[str]] = field(default_factory=list)

    def advance(self, trained, losses, packs, wall_s: float, switch_s: float, end: float):
        """Take a phase's results; the finished rung's record if the rung ends at ``end``."""
        self.states = [trained[s.spec.trial_id] for s in self.states]
        mine = {s.spec.trial_id for s in self.states}
        self.wall_s, self.switch_s = self.wall_s + wall_s, self.switch_s + switch_s
        self.packs += [p for p in packs if mine.intersection(p)]
        rung = self.bracket.rungs[self.rung]
        if rung.r != end:
            return None
        record = RungRecord(
            self.bracket.s, self.rung, len(self.states), rung.r, self.packs,
            {i: losses[i] for i in (s.spec.trial_id for s in self.states)},
            self.wall_s, self.switch_s, {s.spec.trial_id: s.spec for s in self.states},
        )  # fmt: skip
        self.rung, self.wall_s, self.switch_s, self.packs = self.rung + 1, 0.0, 0.0, []
        return record


def best_seen(
    records: Sequence[RungRecord], position: dict[int, int]
) -> tuple[float, TrialSpec, float]:
    """The smallest loss in ``records``: (loss, trial, resource). Ties go to the earliest
    in the sequential order: bracket ``s`` at ``position[s]``, then rung, then trial order."""
    seen = []
    for record in records:
        for k, (trial_id, loss) in enumerate(record.losses.items()):
            key = (position[record.bracket], record.rung, k)
            seen.append((_rank(loss), key, record.specs[trial_id], record.r))
    loss, _, spec, resource = min(seen, key=lambda item: item[:2])
    return loss, spec, resource


def _rank(loss: float) -> float:
    """Losses for ranking: a diverged trial (NaN) ranks last."""
    return math.inf if math.isnan(loss) else loss
