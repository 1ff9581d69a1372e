"""The runner launcher: how the allocator starts an admitted job's runner, and the handle it
watches the runner by.

The allocator is given a :class:`RunnerLauncher` (tests give it a fake one, and watch
the books and the store without starting processes). The real one,
:class:`ProcessLauncher`, starts ``python -m rightsize.service.runner`` per job with the
job file, the admitted launch plan (``Plan.to_json``), the report's path, the service's
pid (the runner dies with it) and one end of a socket pair, whose other end answers the
runner's lease from the allocator's books (:mod:`lease`). A job that runs uploaded code
has the owner's uploads on its path and its runner in a cgroup of its own, which the
runner joins before any of its code runs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rightsize.core.spec import JobSpec
from rightsize.scaling.api import Plan
from rightsize.service.lease import Books, serve_lease
from rightsize.service.uploads import Uploads, runner_cgroup

#: Lines of a failed runner's log kept as the job's error.
ERROR_LINES = 3


class RunnerProcess(Protocol):
    """A started runner, as the allocator watches it."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """Its exit status once it ended, else None."""

    def terminate(self) -> None:
        """Ask it to checkpoint and stop (SIGTERM)."""

    def wait(self, timeout_s: float) -> None:
        """Wait until it ended; killed if it has not within ``timeout_s``."""

    def report(self) -> dict[str, Any] | None:
        """The report it wrote, if any."""

    def last_lines(self) -> str:
        """The last lines of its log (why it failed)."""

    def release(self) -> None:
        """Let go of what it held besides its process (a cgroup)."""


class RunnerLauncher(Protocol):
    """Starts an admitted job's runner."""

    def launch(self, spec: JobSpec, job_id: int, plan: Plan | None,
               books: Books) -> RunnerProcess:  # fmt: skip
        """Start ``spec`` (store row ``job_id``) from ``plan`` (None: a resumed job's master
        relaunches what it last ran), its lease answered from ``books``.

        Raises:
            RightsizeError: the job cannot be started here (uploaded code and no cgroups).
        """


@dataclass(eq=False)
class _Process:
    popen: subprocess.Popen
    log: Path
    report_path: Path
    cgroup: Any | None = None  # the runner's own, for a job that runs uploaded code

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def terminate(self) -> None:
        self.popen.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> None:
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def report(self) -> dict[str, Any] | None:
        return json.loads(self.report_path.read_text()) if self.report_path.exists() else None

    def last_lines(self) -> str:
        if not self.log.exists():
            return ""
        lines = [line for line in self.log.read_text(errors="replace").splitlines()
                 if line.strip()]  # fmt: skip
        return "\n".join(lines[-ERROR_LINES:])

    def release(self) -> None:
        if self.cgroup is not None:
            try:
                self.cgroup.remove()
            except OSError:
                pass  # a process still in it: the next service's sweep removes it


class ProcessLauncher:
    """Starts each job's runner as a process of its own (``rightsize.service.runner``).

    Args:
        uploads: where owners' uploaded workloads are (their folder joins the runner's
            path, and the runner runs in a cgroup).
    """

    def __init__(self, uploads: Uploads) -> None:
        self.uploads = uploads

    def launch(self, spec: JobSpec, job_id: int, plan: Plan | None,
               books: Books) -> RunnerProcess:  # fmt: skip
        home = spec.checkpoint.dir
        home.mkdir(parents=True, exist_ok=True)
        job_file, log, report = home / "job.json", home / "runner.log", home / "report.json"
        job_file.write_text(json.dumps(spec.model_dump(mode="json", by_alias=True)))
        argv = [sys.executable, "-m", "rightsize.service.runner", "--job", str(job_file),
                "--report", str(report), "--parent", str(os.getpid())]  # fmt: skip
        if plan is not None:
            launch = home / "launch.json"
            launch.write_text(json.dumps(plan.to_json()))
            argv += ["--launch", str(launch)]
        env, join, cgroup = os.environ.copy(), None, None
        folder = None if spec.is_script else self.uploads.folder_of(spec.workload)
        if folder is not None:  # the owner's uploads on its path, and the runner in a cgroup
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder),
                                                              env.get("PYTHONPATH")]))  # fmt: skip
            cgroup = runner_cgroup(f"job-{job_id}", spec.budget.resources)
            join = _joiner(cgroup.procs_files)
        ours, theirs = socket.socketpair()
        argv += ["--lease-fd", str(theirs.fileno())]
        with open(log, "ab") as out:
            popen = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=join)  # fmt: skip
        theirs.close()
        serve_lease(ours, spec.name, books)
        return _Process(popen, log, report, cgroup)


def _joiner(procs_files: list[Path]):
    """What a child runs before it executes: it writes itself into the cgroup first, so none
    of its code runs outside it."""

    def join() -> None:
        for path in procs_files:
            path.write_text(str(os.getpid()))

    return join
