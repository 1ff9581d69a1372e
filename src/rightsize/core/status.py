"""A job's status: the one vocabulary every part of rightsize reports a job's lifecycle in.

Four parts of rightsize follow a job through the same lifecycle, each at the grain it
needs: the master's control phases (runtime/jobstate.py's ``Phase``: launching,
training, halted...), the state file's ``status`` column (runtime/state.py), the
service store's ``phase`` column (service/models.py) and the simulator's job states
(cluster/simjob.py). :class:`JobStatus` is the word for that lifecycle anywhere a job
is reported (a store row, an outcome, a filter); the finer vocabularies map onto it
through the tables below, written out rather than matched by spelling, so that a
phase added to one of them without a decision here fails the coverage tests.

The stored strings are :class:`JobStatus`'s own values: the state file holds four of
them (:data:`STATE_FILE`), the store all six, so existing files and databases read the
same as before.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """Where a job is in its lifecycle."""

    WAITING = "waiting"  # queued by the service's scheduler, holding nothing
    RUNNING = "running"  # a master is on it (or was killed while on it)
    FINISHED = "finished"
    FAILED = "failed"  # a node failed too often, never started, or exactly-once broke
    CANCELLED = "cancelled"  # stopped by the service on a user's request
    INTERRUPTED = "interrupted"  # stopped by SIGINT/SIGTERM after a checkpoint; a rerun resumes

    @property
    def done(self) -> bool:
        """Whether the job has ended (nothing runs it, nothing will without a new request)."""
        return self not in (JobStatus.WAITING, JobStatus.RUNNING)

    @property
    def resumable(self) -> bool:
        """Whether a rerun of the job on its state file resumes it (every state-file status
        but ``finished``: a master killed while running, interrupted, or failed)."""
        return self in (JobStatus.RUNNING, JobStatus.INTERRUPTED, JobStatus.FAILED)


#: The statuses a state file's ``job.status`` holds (its master writes no other).
STATE_FILE: frozenset[JobStatus] = frozenset(
    {JobStatus.RUNNING, JobStatus.INTERRUPTED, JobStatus.FAILED, JobStatus.FINISHED}
)

#: The master's control phases (runtime/jobstate.py's ``Phase``, by value): every live phase
#: is ``running``; the three ends are their own status.
PHASE_STATUS: dict[str, JobStatus] = {
    "launching": JobStatus.RUNNING,
    "training": JobStatus.RUNNING,
    "restoring": JobStatus.RUNNING,
    "halted": JobStatus.RUNNING,
    "finishing": JobStatus.RUNNING,
    "finished": JobStatus.FINISHED,
    "failed": JobStatus.FAILED,
    "interrupted": JobStatus.INTERRUPTED,
}

#: The simulator's job states (cluster/simjob.py, by value): a job starting holds its
#: resources as a launching master's job does, so it is ``running``.
SIMULATOR_STATUS: dict[str, JobStatus] = {
    "waiting": JobStatus.WAITING,
    "starting": JobStatus.RUNNING,
    "running": JobStatus.RUNNING,
    "finished": JobStatus.FINISHED,
    "failed": JobStatus.FAILED,
}


def from_phase(phase: str) -> JobStatus:
    """The status of a job whose master is in control phase ``phase``."""
    return _mapped(PHASE_STATUS, phase, "master phase")


def from_simulator(state: str) -> JobStatus:
    """The status of a simulated job in state ``state``."""
    return _mapped(SIMULATOR_STATUS, state, "simulator job state")


def from_state_file(status: str) -> JobStatus:
    """The status a state file's job row holds.

    Raises:
        ValueError: ``status`` is not one a master writes (a damaged or foreign file).
    """
    found = JobStatus(status)
    if found not in STATE_FILE:
        raise ValueError(f"{status!r} is not a state file's job status")
    return found


def _mapped(table: dict[str, JobStatus], value: str, kind: str) -> JobStatus:
    try:
        return table[str(value)]
    except KeyError:
        raise ValueError(f"unknown {kind} {value!r}: known {', '.join(table)}") from None
