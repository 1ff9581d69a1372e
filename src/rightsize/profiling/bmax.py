"""Srift's search for B_max, the largest per-device batch whose training step fits in memory (§4.1).

The search is pure: it calls ``measure(batch) -> peak bytes`` and compares with
the limit, so it is tested with a fake memory curve and driven for real by the
profiler. It doubles the batch until a step does not fit (or the cap is
reached), then bisects. A batch whose peak, extrapolated linearly from the two
largest measured batches, exceeds the limit by ``skip_factor`` is declared "does
not fit" without running it, so the profiler never asks the machine for several
times the memory it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rightsize.core.errors import ResourceError
from rightsize.core.units import format_bytes


@dataclass(frozen=True)
class BmaxSearch:
    """Settings of the search.

    Attributes:
        max_batch: the search stops here even if memory allows more (CPU steps
            at huge batches take minutes and Srift's batches are "up to a few
            thousand").
        rel_tolerance: bisection stops when ``hi - lo <= max(1, lo * rel_tolerance)``.
        skip_factor: see module docstring.
    """

    max_batch: int = 4096
    rel_tolerance: float = 1 / 64
    skip_factor: float = 1.5

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ResourceError(f"max_batch must be >= 1, got {self.max_batch}")
        if not 0 <= self.rel_tolerance < 1:
            raise ResourceError(f"rel_tolerance must be in [0, 1), got {self.rel_tolerance}")


@dataclass
class BmaxResult:
    """The largest fitting batch, why the search stopped, and every probe made."""

    bmax: int
    limited_by: str  # "memory" or "cap"
    probes: list[tuple[int, int]] = field(default_factory=list)  # (batch, peak bytes) measured
    skipped: list[int] = field(default_factory=list)  # batches judged too big unmeasured


def find_max_batch(
    measure: Callable[[int], int],
    limit_bytes: int,
    search: BmaxSearch = BmaxSearch(),
    min_batch: int = 1,
) -> BmaxResult:
    """Search the largest batch whose measured peak memory is within ``limit_bytes``.

    Args:
        min_batch: the smallest batch the model trains at (2 for BatchNorm over 1x1 maps).

    Raises:
        ResourceError: when even ``min_batch`` does not fit.
    """
    result = BmaxResult(bmax=0, limited_by="memory")

    def fits(batch: int) -> bool:
        if _predicted_peak(result.probes, batch) > limit_bytes * search.skip_factor:
            result.skipped.append(batch)
            return False
        peak = measure(batch)
        result.probes.append((batch, peak))
        return peak <= limit_bytes

    if not fits(min_batch):
        peak = result.probes[0][1]
        raise ResourceError(
            f"memory limit {format_bytes(limit_bytes)} is below a training step at batch "
            f"{min_batch} (needs {format_bytes(peak)}); raise the memory limit"
        )
    lo, hi = min_batch, None
    while hi is None:
        if lo >= search.max_batch:
            result.bmax, result.limited_by = search.max_batch, "cap"
            return result
        candidate = min(lo * 2, search.max_batch)
        if fits(candidate):
            lo = candidate
        else:
            hi = candidate
    while hi - lo > max(1, int(lo * search.rel_tolerance)):
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    result.bmax = lo
    return result


def _predicted_peak(probes: list[tuple[int, int]], batch: int) -> float:
    """Linear extrapolation through the two largest probes (0 when there are fewer)."""
    if len(probes) < 2:
        return 0.0
    (b1, p1), (b2, p2) = sorted(probes)[-2:]
    if b2 == b1:
        return float(p2)
    slope = max(0.0, (p2 - p1) / (b2 - b1))
    return p2 + slope * (batch - b2)
