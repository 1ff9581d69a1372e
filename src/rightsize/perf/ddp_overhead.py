"""A DDP step's cost beyond its compute, from this host's DDP probe (``profiling/ddp_probe.py``).

Per world size the probe measured the overhead on a grid of gradient sizes
and compute times. A prediction interpolates it: linearly in compute time
(held at the nearest end outside the measured range), then linearly in the
gradient bytes between the two nearest probed sizes (copies and transfers
take time in proportion to bytes). Below the smallest size the overhead is
held (latency-bound); above the largest it grows in proportion to the bytes.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rightsize.core.errors import ResourceError
from rightsize.core.files import atomic_write_text, read_json

if TYPE_CHECKING:  # the probe imports torch; planning with a saved model needs none
    from rightsize.profiling.ddp_probe import DdpProbeRecord


def _along(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear ``y(x)`` through sorted ``(x, y)`` points, held at both ends."""
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1


class DdpOverheadModel:
    """``overhead_s(world, grad_bytes, compute_s)`` from probe records (module docstring).

    Like the learned comm model it answers for the host it was probed on: ``host``
    is what a plan's instance type must be called for the model to cover it.
    """

    kind = "ddp-probe"

    def __init__(self, records: Sequence[DdpProbeRecord], host: str) -> None:
        if not records:
            raise ResourceError("a DDP overhead model needs probe records; none were given")
        self.records, self.host = list(records), host
        # world -> sorted [(grad_bytes, sorted [(compute_s, overhead_s)])]
        grid: dict[int, dict[int, list[tuple[float, float]]]] = {}
        for r in self.records:
            grid.setdefault(r.world, {}).setdefault(r.grad_bytes, []).append(
                (r.compute_s, r.overhead_s)
            )
        self._grid = {
            world: sorted((size, sorted(points)) for size, points in sizes.items())
            for world, sizes in grid.items()
        }

    @property
    def worlds(self) -> list[int]:
        return sorted(self._grid)

    def covers(self, host: str, world: int) -> bool:
        """Whether the probe measured ``world`` processes on ``host``."""
        return host == self.host and world in self._grid

    def overhead_s(self, world: int, grad_bytes: float, compute_s: float) -> float:
        """Seconds a DDP step of ``world`` processes adds to ``compute_s`` for ``grad_bytes``."""
        if world not in self._grid:
            raise ResourceError(
                f"the DDP probe measured world sizes {self.worlds}, not {world}: "
                f"probe with --world-sizes including {world}"
            )
        sizes = self._grid[world]
        by_size = [(float(size), _along(points, compute_s)) for size, points in sizes]
        largest_size, largest = by_size[-1]
        if grad_bytes > largest_size:
            return largest * grad_bytes / largest_size
        return _along(by_size, grad_bytes)

    def save(self, path: str | Path) -> None:
        data = {"kind": self.kind, "host": self.host,
                "records": [r.to_dict() for r in self.records]}  # fmt: skip
        atomic_write_text(Path(path), json.dumps(data, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> DdpOverheadModel:
        from rightsize.profiling.ddp_probe import records_from_dicts

        data = read_json(path, "DDP probe file")
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind != cls.kind:
            raise ResourceError(f"{path} is not a DDP probe file (kind {kind!r})")
        try:
            return cls(records_from_dicts(data["records"]), data["host"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ResourceError(
                f"{path} is a damaged DDP probe file ({type(exc).__name__}: {exc}); "
                "probe again with rightsize probe --ddp FILE"
            ) from None
