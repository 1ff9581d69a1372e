"""A group of ranks running the user's own script: start, restart by torchrun's contract, end.

The master's side of ``rightsize torchrun``. A group is the shape's workers, each a
rank (:mod:`script_rank`) that meets the others at a ``TCPStore`` the master serves
(a fresh one per group, as torchrun's agent makes one per attempt). The script
owns its state: rightsize never checkpoints it. So

- a **resize in place** (CPU quota, memory limit) is the backend's, with no restart;
- a **change of world size** stops every rank, starts a new group at the new size,
  and the script resumes from its own checkpoint, as it does after a torchrun
  restart. If the script has saved before, the master waits for its next save
  (for at most :data:`SAVE_WAIT_PERIODS` of its saving period, and
  :data:`SAVE_WAIT_MAX_S`) so that nothing is trained twice; otherwise what it
  trained since its last save is lost and measured as such (``lost_s``);
- a **rank that fails** restarts the group (torchrun's ``--max-restarts``: failed
  restarts are counted, and ``TORCHELASTIC_RESTART_COUNT`` says how many);
- the job **ends** when every rank of the group exited 0.

Every start is timed — stopping the old group, launching the processes,
``init_process_group``, the script's own ``torch.load``, and its first optimizer
step — and the total is the measured restart cost the payback rule
(``scaling/payback.py``) weighs before any later change of world size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.runtime.backends.local import Exit
from rightsize.runtime.errors import JobFailed, ScriptFailedAtStart
from rightsize.runtime.jobstate import Phase
from rightsize.runtime.nodes import NodeState
from rightsize.runtime.protocol import ScriptConfig
from rightsize.runtime.records import TimelineAction
from rightsize.runtime.script_state import GroupStart, ScriptState
from rightsize.runtime.steps import Steps

#: A planned restart waits for the script's next save for at most this many saving periods...
SAVE_WAIT_PERIODS = 1.5
#: ... and at most this long (seconds); past it, the progress since the last save is lost.
SAVE_WAIT_MAX_S = 120.0


def rank_order(shape: ClusterShape) -> list:
    return sorted(shape.workers, key=lambda n: int(n.name.rsplit("-", 1)[-1]))


class ScriptGroup:
    """The group of a script's ranks, started, restarted and counted through ``steps``."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.job, self.clock, self.settings = steps.job, steps.clock, steps.settings

    @property
    def script(self) -> ScriptState:
        return self.job.script

    def start_group(self, shape: ClusterShape, begun_at: float, restart: bool = False,
                    stop_s: float = 0.0, lost_s: float = 0.0) -> GroupStart:  # fmt: skip
        """Launch ``shape``'s ranks as one group at a fresh store; returns its (running)
        timing (``restart``: a group was stopped for it, ``stop_s`` ago, throwing ``lost_s``
        away)."""
        job, script, settings = self.job, self.script, self.settings
        ranks = rank_order(shape)
        host, port = store_address(self.steps.nodes.open_rendezvous(len(ranks)))
        start = GroupStart(job.generation, len(ranks), begun_at, restart, stop_s, lost_s=lost_s)
        script.group_started(start)
        run_id = f"{settings.name}-{settings.run_token}"
        configs = [
            (node, ScriptConfig(job.generation, rank, len(ranks), host, port,
                                script.failed_restarts, settings.max_restarts, run_id,
                                settings.startup_timeout_s,
                                str(settings.log_dir.resolve() / f"{node.name}-error.json")))
            for rank, node in enumerate(ranks)
        ]  # fmt: skip
        t0 = self.clock.now()
        self.steps.start_nodes(configs, "the ranks starting")
        start.launch_s = self.clock.now() - t0
        return start

    def settle(self) -> None:
        """The current group's ``first_step_s``, once every rank has taken a step."""
        start = self.script.current
        if start is None or start.first_step_s is not None:
            return
        ranks = self._ranks()
        if ranks and all(r is not None and r.first_step_s is not None for r in ranks):
            start.first_step_s = max(r.first_step_s for r in ranks) - start.begun_at - start.stop_s

    def wait_first_steps(self) -> None:
        """Serve the group until every rank took a step (or ended); a failure meanwhile
        interrupts (the caller handles it)."""
        ranks = self._ranks()

        def stepped() -> bool:
            return all(r is not None and (r.first_step_s is not None or not r.alive) for r in ranks)

        self.steps.wait_until(stepped, self.settings.startup_timeout_s, "the ranks' first steps")
        self.settle()

    def restart(self, shape: ClusterShape, reason: str, planned: bool,
                action: str = TimelineAction.RESTART_GROUP) -> dict[str, Any]:  # fmt: skip
        """Stop the group and start ``shape``'s (torchrun's contract: the script resumes from
        its own checkpoint). ``planned``: a resize (waits for the script's next save first);
        else a failure (counted). Returns the timing details the timeline row carries."""
        job, script = self.job, self.script
        t0 = self.clock.now()
        if planned:
            self._wait_for_save()
        stopped_at = self.clock.now()
        lost_s = self.unsaved_s()
        script.group_stopped(self._group_steps(),
                             sum(n.stats.samples for n in self._ranks() if n is not None),
                             failed=not planned)  # fmt: skip
        for node in job.nodes.alive(NodeRole.WORKER):
            self.steps.nodes.stop(node.name)
        stop_s = self.clock.now() - stopped_at
        self.steps.bump_generation()
        job.take_shape(shape)
        job.move_to(Phase.LAUNCHING)
        start = self.start_group(shape, stopped_at, True, stop_s, lost_s)
        job.move_to(Phase.TRAINING)
        self.wait_first_steps()
        details = start.details() | {"waited_for_save_s": stopped_at - t0}
        self.steps.record(action, reason, t0, **details)
        return details

    def _wait_for_save(self) -> None:
        """If the script saves regularly, let it save once more before its ranks are stopped."""
        script = self.script
        if not saves_regularly(script):
            return
        saves = len(script.saves_at)
        limit = SAVE_WAIT_PERIODS * script.save_period_s()
        try:
            self.steps.wait_until(
                lambda: len(script.saves_at) > saves or script.finished(self.job.shape),
                limit, "the script's next checkpoint",
            )  # fmt: skip
        except JobFailed:
            pass  # no save in time: stop now, and count what is lost

    def unsaved_s(self) -> float:
        """Training time since the script's last save (since the group's start if it never
        saved in it): what a stop now throws away."""
        script = self.script
        now = self.clock.now()
        begun = script.current.begun_at if script.current else now
        last = max([s for s in script.saves_at if s >= begun], default=None)
        return max(0.0, now - (last if last is not None else begun))

    def _ranks(self) -> list[NodeState | None]:
        return [self.job.nodes.get(n.name) for n in self.job.shape.workers]

    def _group_steps(self) -> int:
        return max((r.stats.steps for r in self._ranks() if r is not None), default=0)

    def steps_done(self) -> int:
        """Optimizer steps the script took in all (every group's, trained twice or not)."""
        return self.script.steps_before + self._group_steps()

    def check_started(self, exit_: Exit, node: NodeState, resumed: bool) -> None:
        """A rank exited with an error code before the job ever took a step, on its first
        launch (``resumed``: this master took over a job, not a first launch): the script
        cannot run as given (a bad argument, a missing import).

        Raises:
            ScriptFailedAtStart: with the last line the script printed, and where its log is.
        """
        script = self.script
        stepped = any(s.first_step_s is not None for s in script.starts) or any(
            n.stats.steps for n in self.job.nodes.by_name.values())  # fmt: skip
        first_launch = script.failed_restarts == 0 and len(script.starts) == 1 and not resumed
        if exit_.returncode <= 0 or exit_.oom_killed or stepped or not first_launch:
            return
        log = self.settings.log_dir / f"{node.name}.log"
        said = last_words(log, node.name)
        raise ScriptFailedAtStart(
            f"{self.settings.script} exited with code {exit_.returncode} on {node.name} before "
            f"its first step{': ' + said if said else ''} (its log: {log})"
        )


def saves_regularly(script: ScriptState) -> bool:
    """The script has saved at least twice, often enough that a restart waits for its next
    save (so that nothing is trained twice)."""
    period = script.save_period_s()
    return period is not None and SAVE_WAIT_PERIODS * period <= SAVE_WAIT_MAX_S


def store_address(rendezvous: str) -> tuple[str, int]:
    """``tcp://host:port`` as the host and port a rank's ``TCPStore`` client takes."""
    host, port = rendezvous.removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)


def last_words(log: Path, name: str) -> str:
    """The last line the script itself wrote to a rank's log (not rightsize's own lines)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(("[rightsize]", f"{name}: ")):
            return text[:300]
    return ""
