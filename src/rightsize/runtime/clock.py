"""Time as a collaborator: the master reads ``now()`` and waits through ``sleep()``.

The real clock is the wall clock, so that job times persisted in the state file
stay meaningful across a master restart. Tests pass a :class:`FakeClock` and
drive time by hand (the habit STYLE.md takes from torch.distributed.elastic:
no real sleeps a test has to wait out).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds (wall clock for the real one)."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""


class SystemClock:
    """The machine's wall clock."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when told to (``sleep`` advances it instantly)."""

    def __init__(self, start: float = 0.0) -> None:
        self.time = start

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.time += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self.time += seconds


class JobClock:
    """The job's time: the clock's ``now()``, and seconds since the job started (a resumed
    job's start is its first master's, read from the state file)."""

    def __init__(self, clock: Clock, started_at: float | None = None) -> None:
        self.clock = clock
        self.started_at = clock.now() if started_at is None else started_at

    def now(self) -> float:
        return self.clock.now()

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def time_s(self) -> float:
        """Seconds since the job started."""
        return self.clock.now() - self.started_at
