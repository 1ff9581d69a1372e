"""What the master knows of a script job beyond its shape: its groups, exits, saves, ledger.

Plain state (``JobState.script``), moved by :mod:`script_group` and the master's
answers to ranks (:mod:`rpc`), read by the report and the payback rule.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from rightsize.core.shape import ClusterShape
from rightsize.runtime.protocol import MarkKind
from rightsize.runtime.sample_ledger import SampleLedger
from rightsize.scaling.payback import RestartCost

#: Saves by several ranks this close together (seconds) are one checkpoint of the job.
SAVE_MERGE_S = 1.0


@dataclass
class GroupStart:
    """How one group's start went, timed on the master's clock (seconds)."""

    generation: int
    world: int
    begun_at: float  # master clock: the stop (a restart) or the launch began
    restart: bool = False  # a group stopped for it (else the job's launch, or a resume)
    stop_s: float = 0.0
    launch_s: float = 0.0  # processes started until every rank registered
    first_step_s: float | None = None  # the launch began until every rank took a step
    lost_s: float = 0.0  # training since the script's last save, thrown away by the stop
    marks: dict[MarkKind, float] = field(default_factory=dict)  # slowest rank's

    @property
    def restart_s(self) -> float | None:
        """Stop, relaunch, rendezvous, reload and first step: the whole cost of this start."""
        return None if self.first_step_s is None else self.stop_s + self.first_step_s

    def details(self) -> dict[str, Any]:
        out = {"world": self.world, "stop_s": self.stop_s, "launch_s": self.launch_s,
               "lost_s": self.lost_s}  # fmt: skip
        out |= {f"{kind}_s": seconds for kind, seconds in self.marks.items()}
        if self.first_step_s is not None:
            out |= {"first_step_s": self.first_step_s, "restart_s": self.restart_s}
        return out


@dataclass
class ScriptState:
    """What the master knows of a script job beyond its shape (``JobState.script``)."""

    ledger: SampleLedger = field(default_factory=SampleLedger)
    exits: dict[str, int] = field(default_factory=dict)  # rank -> exit code, this group
    #: ranks that failed after another rank of their group had finished the script (gloo's
    #: teardown aborts now and then, "terminate called without an active exception"): how
    ended_late: dict[str, str] = field(default_factory=dict)
    failed_restarts: int = 0  # torchrun's restart count
    steps_before: int = 0  # optimizer steps every earlier group took (redone ones included)
    samples_before: int = 0  # samples every earlier group's ranks trained
    saves_at: list[float] = field(default_factory=list)  # master clock: the script saved
    starts: list[GroupStart] = field(default_factory=list)
    sampler_used: bool = False

    @property
    def current(self) -> GroupStart | None:
        return self.starts[-1] if self.starts else None

    @property
    def done(self) -> set[str]:
        """Ranks of the group that exited 0, or failed once another had (the script was over)."""
        return {name for name, code in self.exits.items() if code == 0} | set(self.ended_late)

    def finished(self, shape: ClusterShape) -> bool:
        """Every rank of the group is done (see :attr:`done`)."""
        done = self.done
        return bool(done) and all(n.name in done for n in shape.workers)

    def group_started(self, start: GroupStart) -> None:
        """A new group starts (``start`` times it): the last group's exits are forgotten, and
        the ledger hands out its samples anew."""
        self.exits.clear()
        self.ended_late.clear()
        self.ledger.new_group(start.generation, start.world)
        self.starts.append(start)

    def group_stopped(self, steps: int, samples: int, failed: bool) -> None:
        """The group is stopped having taken ``steps`` and ``samples``; ``failed``: a rank's
        failure stopped it (torchrun counts that restart)."""
        self.steps_before += steps
        self.samples_before += samples
        if failed:
            self.failed_restarts += 1

    def rank_exited(self, name: str, returncode: int) -> None:
        self.exits[name] = returncode

    def rank_ended_late(self, name: str, how: str) -> None:
        """A rank failed (``how``) after another had finished the script: it counts as done."""
        self.ended_late[name] = how

    def sampler_asked(self) -> None:
        """A rank's ElasticSampler asked for samples: the ledger's guarantee applies."""
        self.sampler_used = True

    def resumed(self, ledger: SampleLedger) -> None:
        """A new master takes over the script's ledger from the state file."""
        self.ledger = ledger

    def save_period_s(self) -> float | None:
        """The script's median time between saves, once it has saved twice."""
        gaps = [b - a for a, b in zip(self.saves_at, self.saves_at[1:], strict=False)]
        return statistics.median(gaps) if gaps else None

    def saved(self, now: float) -> None:
        """A rank saved a checkpoint file (ranks saving at once are one save)."""
        if not self.saves_at or now - self.saves_at[-1] > SAVE_MERGE_S:
            self.saves_at.append(now)

    def mark(self, kind: MarkKind, seconds: float) -> None:
        """A rank of the current group timed part of its start (the slowest rank counts)."""
        if self.current is not None:
            self.current.marks[kind] = max(self.current.marks.get(kind, 0.0), seconds)

    def restart_cost(self) -> RestartCost | None:
        """The measured cost of the last restart (or, before any, of the first launch)."""
        measured = [s for s in self.starts if s.restart_s is not None]
        restarts = [s for s in measured if s.restart]
        last = (restarts or measured or [None])[-1]
        if last is None:
            return None
        return RestartCost(last.restart_s, bool(restarts))
