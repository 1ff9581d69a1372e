"""The profiles the service plans cloud configurations with: saved, or measured on demand.

Srift's plans start from a profile of the workload (§4.1). The service keeps one per
(workload, dataset, options) under its workdir; when a recommendation asks for one it
does not have, it measures it in a ``rightsize profile`` subprocess — quick settings
(the curve's shape is what planning needs), one thread so that it takes one core of the
machine the service's jobs share — and answers "profiling" until the file is there.
One profile is measured at a time; a failed one says why and may be asked for again.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rightsize.profiling.profile import Profile
from rightsize.profiling.settings import (
    QUICK_MEMORY_LIMIT,
    QUICK_REPEATS,
    QUICK_SEARCH,
    profile_file_name,
)

#: What a quick profile measures (as ``plan --workload`` does), on one thread.
QUICK_ARGS = ("--max-batch", str(QUICK_SEARCH.max_batch), "--repeats", str(QUICK_REPEATS),
              "--memory-limit", str(QUICK_MEMORY_LIMIT), "--threads", "1")  # fmt: skip
#: Lines of a failed profiler's output kept as the reason.
ERROR_LINES = 3


class ProfilingPhase(StrEnum):
    READY = "ready"
    PROFILING = "profiling"
    FAILED = "failed"


@dataclass(frozen=True)
class ProfilingState:
    phase: ProfilingPhase
    started_at: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class WorkloadKey:
    """A profile's identity: the model, its data and its options."""

    workload: str
    dataset: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def file_name(self) -> str:
        return profile_file_name(self.workload, self.dataset, "cpu", dict(self.options))


class ProfileBook:
    """Saved profiles in ``directory``, and the one being measured."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._running: tuple[WorkloadKey, subprocess.Popen, float, Path] | None = None
        self._failed: dict[WorkloadKey, str] = {}

    def profile(self, key: WorkloadKey) -> Profile | None:
        path = self.directory / key.file_name
        return Profile.load(path) if path.exists() else None

    def state(self, key: WorkloadKey) -> ProfilingState:
        """Where ``key``'s profile stands (reaping a finished measurement first)."""
        with self._lock:
            self._reap()
            if (self.directory / key.file_name).exists():
                return ProfilingState(ProfilingPhase.READY)
            if self._running and self._running[0] == key:
                return ProfilingState(ProfilingPhase.PROFILING, started_at=self._running[2])
            if key in self._failed:
                return ProfilingState(ProfilingPhase.FAILED, error=self._failed[key])
            return ProfilingState(ProfilingPhase.FAILED, error="not profiled")

    def request(self, key: WorkloadKey) -> ProfilingState:
        """``key``'s profile if there is one, else start measuring it (if nothing else is)."""
        state = self.state(key)
        if state.phase is not ProfilingPhase.FAILED:
            return state
        with self._lock:
            if self._running is not None:
                busy = self._running[0].workload
                return ProfilingState(ProfilingPhase.FAILED,
                                      error=f"busy profiling {busy}: ask again in a minute")  # fmt: skip
            self._failed.pop(key, None)
            self.directory.mkdir(parents=True, exist_ok=True)
            log = self.directory / (key.file_name + ".log")
            argv = [sys.executable, "-m", "rightsize", "profile", key.workload, "--dataset",
                    key.dataset, *QUICK_ARGS, "--quiet", "--out",
                    str(self.directory / key.file_name)]  # fmt: skip
            for name, value in key.options:
                argv += ["--option", f"{name}={value}"]
            with open(log, "wb") as out:
                popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)  # fmt: skip
            self._running = (key, popen, time.time(), log)
            return ProfilingState(ProfilingPhase.PROFILING, started_at=time.time())

    def stop(self) -> None:
        with self._lock:
            if self._running is not None:
                self._running[1].kill()
                self._running[1].wait()
                self._running = None

    def _reap(self) -> None:
        if self._running is None:
            return
        key, popen, _, log = self._running
        code = popen.poll()
        if code is None:
            return
        self._running = None
        if code != 0:
            lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
            self._failed[key] = "\n".join(lines[-ERROR_LINES:]) or f"exit status {code}"
