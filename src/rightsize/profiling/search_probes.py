"""The B_max search's measurements on a real device, reported as they are made.

A probe measures one step's peak memory; on a CPU it runs in a child process
the kernel bounds (``profiling/bounded.py``), so the profiler's own process
never holds a batch that does not fit. With a step-time bound a batch known to
fit is then timed once here, with the profile's threads (the child runs one).
Each report carries the time the timing phase would take at the largest batch
known to fit so far (``profiling/progress.py``).
"""

from __future__ import annotations

from typing import Protocol

from rightsize.core.units import format_bytes, format_duration
from rightsize.profiling.bound import MemoryBound
from rightsize.profiling.bounded import run_bounded
from rightsize.profiling.memory import PeakMemoryMeter
from rightsize.profiling.profile import sample_batches
from rightsize.profiling.progress import ProgressClock, timing_seconds


class ProbedSession(Protocol):
    """What the probes need of the profiler's session."""

    min_batch: int
    timed: list[tuple[int, float]]
    clock: ProgressClock

    def measure_peak(self, batch_size: int) -> int: ...
    def step_seconds(self, batch_size: int) -> float: ...


class SearchProbes:
    """``peak(batch)`` and ``step_time(batch)`` for :func:`~rightsize.profiling.bmax.find_max_batch`."""

    def __init__(
        self,
        session: ProbedSession,
        bound: MemoryBound,
        meter: PeakMemoryMeter,
        sampling: str,
        steps_per_batch: int,
    ) -> None:
        self.session, self.bound, self.meter = session, bound, meter
        self.sampling, self.steps_per_batch = sampling, steps_per_batch
        self.largest_fit = session.min_batch

    def peak(self, batch: int) -> int | None:
        """Peak bytes of a step at ``batch``; None when it was stopped at the process bound."""
        session, process = self.session, self.bound.process_bytes
        if process is None:
            peak = session.measure_peak(batch)
        else:
            self.meter.settle()  # the child forks from here: from the floor, not a high tide
            outcome = run_bounded(lambda: session.measure_peak(batch), process)
            if outcome.stopped:
                self._say(f"batch {batch} stopped at the {format_bytes(process)} bound "
                          f"({outcome.detail})")  # fmt: skip
                return None
            peak = outcome.value
        fits = peak <= self.bound.limit_bytes
        if fits:
            self.largest_fit = max(self.largest_fit, batch)
        self._say(f"batch {batch} needs {format_bytes(peak)}: {'fits' if fits else 'too big'}")
        return peak

    def step_time(self, batch: int) -> float:
        seconds = self.session.step_seconds(batch)
        self._say(f"batch {batch} takes {format_duration(seconds)} a step")
        return seconds

    def _say(self, message: str) -> None:
        timed = self.session.timed
        batches = sample_batches(self.sampling, self.largest_fit, self.session.min_batch)
        left = timing_seconds(batches, self.steps_per_batch, timed) if len(timed) > 1 else None
        self.session.clock.say(f"B_max search: {message}", left)
