"""The one front door to a training job: policy, master, signals, outcome, report.

``rightsize run`` and ``rightsize torchrun`` (cli/run_cmd.py, on this machine or a Ray
cluster: ``runtime.backend`` picks the master's backend, nothing else differs) and the
service's runner process (service/runner.py, under a lease) each train a job through
:func:`run_job`, so what a job's end means is decided once: the exceptions the master
raises become a :class:`JobOutcome` (a status, an exit code, the report, the failure's
message), and the report is written before the caller hears of it. What a caller adds
is its own: the command line prints and records the run in the store; the runner only
exits, and the service reads the report it left.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rightsize.core.errors import RightsizeError
from rightsize.core.files import atomic_write_text
from rightsize.core.spec import JobSpec
from rightsize.core.status import JobStatus
from rightsize.runtime.errors import ExactlyOnceViolated, JobFailed, JobInterrupted
from rightsize.runtime.lease import LeaseClosed
from rightsize.scaling.registry import policy_for

if TYPE_CHECKING:
    from rightsize.runtime.lease import CapacityLease
    from rightsize.runtime.records import ProgressStatus
    from rightsize.scaling.api import Plan


class ExitCode(IntEnum):
    """How a job's process exits (a signal's stop exits ``SIGNALLED + N``: the shell's way)."""

    TRAINED = 0
    FAILED = 1  # a node kept failing, exactly-once broke (the report says), the lease went
    CANNOT_RUN = 2  # the job as written cannot run: nothing trained
    SIGNALLED = 128


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended.

    Attributes:
        status: finished, failed or interrupted (a rerun resumes an interrupted or failed job).
        exit_code: the process's exit status for this end (:class:`ExitCode`, or
            ``SIGNALLED + N`` for signal N).
        report: the job's report, when it trained to its end (also when exactly-once broke);
            it is written to the report file before this outcome is returned.
        failure: why it did not finish cleanly (None when it did), one line.
        refused: the job could not run at all (its settings, its policy, this machine):
            nothing trained and the state file may be untouched.
    """

    status: JobStatus
    exit_code: int
    report: dict[str, Any] | None = None
    failure: str | None = None
    refused: bool = False


def run_job(
    spec: JobSpec,
    report_path: Path,
    *,
    policy: str | None = None,
    fresh: bool = False,
    oversubscribe: bool = False,
    lease: CapacityLease | None = None,
    launch: Plan | None = None,
    warn: Callable[[str], None] | None = None,
    on_sample: Callable[[ProgressStatus], None] | None = None,
    command: str | None = None,
) -> JobOutcome:
    """Train ``spec`` to its end (or resume it) and write its report to ``report_path``.

    ``policy`` overrides the job file's policy by name; ``lease`` is the capacity the job
    may grow into (default: this machine's, or the Ray cluster's); ``launch`` a plan to
    start from (the service's admission, or history's); ``command``, if given, is recorded
    in the report as what ran it. SIGINT and SIGTERM ask the job to checkpoint and stop
    while it runs (a second one ends at once: KeyboardInterrupt), and the previous
    handlers are back when this returns.
    """
    from rightsize.runtime.master import Master  # imports torch: only when running

    try:
        master = Master(spec, policy_for(spec, policy), fresh=fresh, warn=warn,
                        on_sample=on_sample, oversubscribe=oversubscribe, lease=lease,
                        launch=launch)  # fmt: skip
        with stop_signals(master):
            report = master.run()
    except ExactlyOnceViolated as exc:
        return _reported(exc.report, report_path, command, failure=str(exc))
    except JobInterrupted as exc:
        return JobOutcome(JobStatus.INTERRUPTED, ExitCode.SIGNALLED + exc.signum, failure=str(exc))
    except (JobFailed, LeaseClosed) as exc:
        return JobOutcome(JobStatus.FAILED, ExitCode.FAILED, failure=str(exc))
    except RightsizeError as exc:
        return JobOutcome(JobStatus.FAILED, ExitCode.CANNOT_RUN, failure=str(exc), refused=True)
    return _reported(report, report_path, command)


def _reported(report: dict[str, Any], path: Path, command: str | None,
              failure: str | None = None) -> JobOutcome:  # fmt: skip
    """The outcome of a job that trained to its end, its report written first."""
    if command is not None:
        report["command"] = command
    atomic_write_text(path, json.dumps(report, indent=2, default=str))
    if failure is None:
        return JobOutcome(JobStatus.FINISHED, ExitCode.TRAINED, report)
    return JobOutcome(JobStatus.FAILED, ExitCode.FAILED, report, failure)


@contextmanager
def stop_signals(master) -> Iterator[None]:
    """SIGINT and SIGTERM ask the master to checkpoint and stop (``run`` then raises
    JobInterrupted); a second one while it does ends at once (KeyboardInterrupt)."""
    handler = lambda signum, _frame: master.request_stop(signum)  # noqa: E731
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
