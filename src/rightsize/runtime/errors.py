"""The runtime's own exceptions."""

from __future__ import annotations

from rightsize.core.errors import RightsizeError, SpecError


class JobFailed(RightsizeError, RuntimeError):
    """The job cannot go on (a node keeps failing, or never starts)."""


class ExactlyOnceViolated(RightsizeError, RuntimeError):
    """The job trained to its end, but the parameter servers' logs show samples missing or
    applied twice in some epoch. The message names the epochs and how many samples."""

    def __init__(self, message: str, report: dict) -> None:
        super().__init__(message)
        self.report = report


class JobInterrupted(RightsizeError, RuntimeError):
    """SIGINT or SIGTERM stopped the job (after a checkpoint, where one could be taken);
    rerunning the same job resumes it."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


class Interrupted(Exception):
    """A node died while an operation waited; the operation is abandoned for recovery."""


class StopRequested(Interrupted):
    """A signal asked the job to stop while an operation waited; it is abandoned likewise."""


class ScriptFailedAtStart(SpecError):
    """The user's script exited with an error before any rank took a step, on the job's first
    launch: bad input (a wrong argument, a missing import), not something to restart."""
