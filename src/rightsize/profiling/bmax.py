"""Srift's search for B_max, the largest per-device batch whose training step fits in memory (§4.1).

The search is pure: it calls ``measure(batch) -> peak bytes`` and compares with
the limit, so it is tested with a fake memory curve and driven for real by the
profiler. It doubles the batch until a step does not fit (or the cap is
reached), then bisects. A batch whose peak, extrapolated linearly from the two
largest measured batches, exceeds the limit by ``skip_factor`` is declared "does
not fit" without running it, so the profiler never asks the machine for several
times the memory it has. ``measure`` may answer ``None``: the step was stopped
at the memory bound before it finished (the profiler runs probes in a process
the kernel bounds), which also means "does not fit".

On a CPU memory is rarely what limits a useful batch: a ResNet-18 step that
fills 20 GiB takes minutes. With ``max_step_s`` the search also times each
doubling (``step_time(batch)``, only for batches known to fit) and stops where
a step would take longer, at the batch where the line through the last two
timed steps crosses the bound (step time is close to linear in the batch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from rightsize.core.errors import ResourceError
from rightsize.core.units import format_bytes

#: Why a search stopped: memory, the batch cap, or the step-time bound.
LIMITED_BY = ("memory", "cap", "time")


@dataclass(frozen=True)
class BmaxSearch:
    """Settings of the search.

    Attributes:
        max_batch: the search stops here even if memory allows more (CPU steps
            at huge batches take minutes and Srift's batches are "up to a few
            thousand").
        rel_tolerance: bisection stops when ``hi - lo <= max(1, lo * rel_tolerance)``.
        skip_factor: see module docstring.
        max_step_s: the longest training step the search accepts (None: no bound).
        time_floor: the step-time bound never stops the search below this batch (a
            profile's time budget on a busy host would otherwise leave B_max at 1, and
            Srift's four batches need a few distinct sizes: profiling/budget.py).
    """

    max_batch: int = 4096
    rel_tolerance: float = 1 / 64
    skip_factor: float = 1.5
    max_step_s: float | None = None
    time_floor: int = 1

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ResourceError(f"max_batch must be >= 1, got {self.max_batch}")
        if not 0 <= self.rel_tolerance < 1:
            raise ResourceError(f"rel_tolerance must be in [0, 1), got {self.rel_tolerance}")
        if self.max_step_s is not None and not self.max_step_s > 0:
            raise ResourceError(f"max_step_s must be > 0, got {self.max_step_s}")
        if self.time_floor < 1:
            raise ResourceError(f"time_floor must be >= 1, got {self.time_floor}")


@dataclass
class BmaxResult:
    """The largest fitting batch, why the search stopped, and every probe made."""

    bmax: int
    limited_by: str  # one of LIMITED_BY
    probes: list[tuple[int, int]] = field(default_factory=list)  # (batch, peak bytes) measured
    skipped: list[int] = field(default_factory=list)  # batches judged too big unmeasured
    stopped: list[int] = field(default_factory=list)  # batches stopped at the memory bound
    step_times: list[tuple[int, float]] = field(default_factory=list)  # (batch, seconds) timed


def find_max_batch(
    measure: Callable[[int], int | None],
    limit_bytes: int,
    search: BmaxSearch = BmaxSearch(),
    min_batch: int = 1,
    step_time: Callable[[int], float] | None = None,
) -> BmaxResult:
    """Search the largest batch whose measured peak memory is within ``limit_bytes``.

    Args:
        min_batch: the smallest batch the model trains at (2 for BatchNorm over 1x1 maps).
        step_time: seconds of one step at a batch known to fit; needed with ``max_step_s``.

    Raises:
        ResourceError: when even ``min_batch`` does not fit.
    """
    if search.max_step_s is not None and step_time is None:
        raise ValueError("a step-time bound needs a step_time function")
    return _Search(measure, limit_bytes, search, step_time).run(min_batch)


class _Search:
    def __init__(self, measure, limit_bytes, search, step_time) -> None:
        self.measure, self.limit, self.search, self.step_time = (
            measure,
            limit_bytes,
            search,
            step_time,
        )
        self.result = BmaxResult(bmax=0, limited_by="memory")

    def run(self, min_batch: int) -> BmaxResult:
        result, search = self.result, self.search
        if not self._fits_memory(min_batch):
            need = f"needs {format_bytes(result.probes[0][1])}" if result.probes else "stopped"
            raise ResourceError(
                f"memory limit {format_bytes(self.limit)} is below a training step at batch "
                f"{min_batch} ({need}); raise the memory limit"
            )
        lo, hi, cap, cap_reason = min_batch, None, search.max_batch, "cap"
        if self._too_slow(min_batch):
            return self._done(min_batch, "time")
        while hi is None:
            if lo >= cap:
                return self._done(cap, cap_reason)
            candidate = min(lo * 2, cap)
            if not self._fits_memory(candidate):
                hi = candidate
            elif self._too_slow(candidate):
                return self._done(self._time_cap(lo, candidate), "time")
            else:
                lo = candidate
        while hi - lo > max(1, int(lo * search.rel_tolerance)):
            mid = (lo + hi) // 2
            if self._predicted_slow(mid):
                hi, result.limited_by = mid, "time"
            elif self._fits_memory(mid):
                lo = mid
            else:
                hi, result.limited_by = mid, "memory"
        result.bmax = lo
        return result

    def _done(self, bmax: int, reason: str) -> BmaxResult:
        self.result.bmax, self.result.limited_by = bmax, reason
        return self.result

    def _fits_memory(self, batch: int) -> bool:
        result = self.result
        if _line(result.probes, batch) > self.limit * self.search.skip_factor:
            result.skipped.append(batch)
            return False
        peak = self.measure(batch)
        if peak is None:
            result.stopped.append(batch)
        else:
            result.probes.append((batch, peak))
        return peak is not None and peak <= self.limit

    def _too_slow(self, batch: int) -> bool:
        """Time a batch known to fit (during doubling) and compare with the bound.

        The first step at a new batch size carries one-off work (oneDNN builds
        kernels for new shapes, fresh pages are faulted in): a step over the bound
        is timed once more and the faster of the two counts.
        """
        bound = self.search.max_step_s
        if bound is None:
            return False
        assert self.step_time is not None  # checked in find_max_batch
        seconds = self.step_time(batch)
        if seconds > bound and batch > self.search.time_floor:  # below the floor it cannot stop
            seconds = min(seconds, self.step_time(batch))
        self.result.step_times.append((batch, seconds))
        return seconds > bound and batch > self.search.time_floor

    def _predicted_slow(self, batch: int) -> bool:
        """During bisection: the time line through the timed steps, instead of another step."""
        bound = self.search.max_step_s
        return (bound is not None and batch > self.search.time_floor
                and _line(self.result.step_times, batch) > bound)  # fmt: skip

    def _time_cap(self, fast: int, slow: int) -> int:
        """The batch between ``fast`` and ``slow`` where the time line crosses the bound."""
        times = dict(self.result.step_times)
        bound = self.search.max_step_s
        floor = max(fast, min(slow - 1, self.search.time_floor))
        if fast not in times or bound is None or times[slow] <= times[fast]:
            return floor
        slope = (times[slow] - times[fast]) / (slow - fast)
        return max(floor, min(slow - 1, math.floor(fast + (bound - times[fast]) / slope)))


def _line(points: list[tuple[int, float]] | list[tuple[int, int]], batch: int) -> float:
    """Linear extrapolation through the two largest points (0 when there are fewer)."""
    if len(points) < 2:
        return 0.0
    (b1, p1), (b2, p2) = sorted(points)[-2:]
    if b2 == b1:
        return float(p2)
    slope = max(0.0, (p2 - p1) / (b2 - b1))
    return p2 + slope * (batch - b2)
