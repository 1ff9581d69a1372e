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
from typing import TYPE_CHECKING, Any

from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.runtime.backends.local import Exit
from rightsize.runtime.errors import JobFailed, ScriptFailedAtStart
from rightsize.runtime.jobstate import Phase
from rightsize.runtime.protocol import ScriptConfig
from rightsize.runtime.script_state import GroupStart, ScriptState

if TYPE_CHECKING:
    from rightsize.runtime.master import Master
    from rightsize.runtime.nodes import NodeState

#: A planned restart waits for the script's next save for at most this many saving periods...
SAVE_WAIT_PERIODS = 1.5
#: ... and at most this long (seconds); past it, the progress since the last save is lost.
SAVE_WAIT_MAX_S = 120.0


def rank_order(shape: ClusterShape) -> list:
    return sorted(shape.workers, key=lambda n: int(n.name.rsplit("-", 1)[-1]))


def start_group(master: Master, shape: ClusterShape, begun_at: float, restart: bool = False,
                stop_s: float = 0.0, lost_s: float = 0.0) -> GroupStart:  # fmt: skip
    """Launch ``shape``'s ranks as one group at a fresh store; returns its (running) timing
    (``restart``: a group was stopped for it, ``stop_s`` ago, throwing ``lost_s`` away)."""
    from rightsize.runtime import lifecycle

    job, script = master.job, master.job.script
    ranks = rank_order(shape)
    host, port = master.open_store(len(ranks))
    script.exits.clear()
    script.ended_late.clear()
    script.ledger.new_group(job.generation, len(ranks))
    start = GroupStart(job.generation, len(ranks), begun_at, restart, stop_s, lost_s=lost_s)
    script.starts.append(start)
    run_id = f"{master.spec.name}-{master.run_token}"
    configs = [
        (node, ScriptConfig(job.generation, rank, len(ranks), host, port, script.failed_restarts,
                            master.spec.runtime.max_restarts, run_id,
                            master.spec.runtime.startup_timeout_s,
                            str(master.log_dir.resolve() / f"{node.name}-error.json")))
        for rank, node in enumerate(ranks)
    ]  # fmt: skip
    t0 = master.clock.now()
    lifecycle.start_nodes(master, configs, "the ranks starting")
    start.launch_s = master.clock.now() - t0
    return start


def settle(master: Master) -> None:
    """The current group's ``first_step_s``, once every rank has taken a step."""
    start = master.job.script.current
    if start is None or start.first_step_s is not None:
        return
    ranks = [master.job.nodes.get(n.name) for n in master.job.shape.workers]
    if ranks and all(r is not None and r.first_step_s is not None for r in ranks):
        start.first_step_s = max(r.first_step_s for r in ranks) - start.begun_at - start.stop_s


def wait_first_steps(master: Master) -> None:
    """Serve the group until every rank took a step (or ended); a failure meanwhile
    interrupts (the caller handles it)."""
    job = master.job
    ranks = [job.nodes.get(n.name) for n in job.shape.workers]

    def stepped() -> bool:
        return all(r is not None and (r.first_step_s is not None or not r.alive) for r in ranks)

    master.wait_until(stepped, master.spec.runtime.startup_timeout_s, "the ranks' first steps")
    settle(master)


def restart(master: Master, shape: ClusterShape, reason: str, planned: bool,
            action: str = "restart_group") -> dict[str, Any]:  # fmt: skip
    """Stop the group and start ``shape``'s (torchrun's contract: the script resumes from its
    own checkpoint). ``planned``: a resize (waits for the script's next save first); else a
    failure (counted). Returns the timing details the timeline row carries."""
    from rightsize.runtime import lifecycle

    job, script = master.job, master.job.script
    t0 = master.clock.now()
    if planned:
        _wait_for_save(master)
    else:
        script.failed_restarts += 1
    stopped_at = master.clock.now()
    lost_s = unsaved_s(master)
    script.steps_before += _group_steps(master)
    script.samples_before += sum(n.stats.samples for n in _ranks(master) if n is not None)
    for node in job.nodes.alive(NodeRole.WORKER):
        master.stop_node(node.name)
    stop_s = master.clock.now() - stopped_at
    lifecycle.bump_generation(master)
    job.shape = shape
    job.move_to(Phase.LAUNCHING)
    start = start_group(master, shape, stopped_at, True, stop_s, lost_s)
    job.move_to(Phase.TRAINING)
    wait_first_steps(master)
    details = start.details() | {"waited_for_save_s": stopped_at - t0}
    lifecycle.record(master, action, reason, t0, **details)
    return details


def saves_regularly(script: ScriptState) -> bool:
    """The script has saved at least twice, often enough that a restart waits for its next
    save (so that nothing is trained twice)."""
    period = script.save_period_s()
    return period is not None and SAVE_WAIT_PERIODS * period <= SAVE_WAIT_MAX_S


def _wait_for_save(master: Master) -> None:
    """If the script saves regularly, let it save once more before its ranks are stopped."""
    script = master.job.script
    if not saves_regularly(script):
        return
    saves = len(script.saves_at)
    limit = SAVE_WAIT_PERIODS * script.save_period_s()
    try:
        master.wait_until(lambda: len(script.saves_at) > saves or script.finished(master.shape),
                          limit, "the script's next checkpoint")  # fmt: skip
    except JobFailed:
        pass  # no save in time: stop now, and count what is lost


def unsaved_s(master: Master) -> float:
    """Training time since the script's last save (since the group's start if it never saved
    in it): what a stop now throws away."""
    script = master.job.script
    now = master.clock.now()
    begun = script.current.begun_at if script.current else now
    last = max([s for s in script.saves_at if s >= begun], default=None)
    return max(0.0, now - (last if last is not None else begun))


def _ranks(master: Master) -> list[NodeState | None]:
    return [master.job.nodes.get(n.name) for n in master.job.shape.workers]


def _group_steps(master: Master) -> int:
    return max((r.stats.steps for r in _ranks(master) if r is not None), default=0)


def steps_done(master: Master) -> int:
    """Optimizer steps the script took in all (every group's, trained twice or not)."""
    return master.job.script.steps_before + _group_steps(master)




def check_started(master: Master, exit_: Exit, node: NodeState) -> None:
    """A rank exited with an error code before the job ever took a step, on its first launch:
    the script cannot run as given (a bad argument, a missing import).

    Raises:
        ScriptFailedAtStart: with the last line the script printed, and where its log is.
    """
    script = master.job.script
    stepped = any(s.first_step_s is not None for s in script.starts) or any(
        n.stats.steps for n in master.job.nodes.by_name.values())  # fmt: skip
    first_launch = script.failed_restarts == 0 and len(script.starts) == 1 and not master.resumed_from
    if exit_.returncode <= 0 or exit_.oom_killed or stepped or not first_launch:
        return
    log = master.log_dir / f"{node.name}.log"
    said = last_words(log, node.name)
    raise ScriptFailedAtStart(
        f"{master.spec.script} exited with code {exit_.returncode} on {node.name} before its "
        f"first step{': ' + said if said else ''} (its log: {log})"
    )


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
