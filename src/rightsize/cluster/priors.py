"""What the simulator knows about a job before it starts: profiled shapes and similar finished jobs.

Two sources feed ``LaunchRequest.prior`` / ``Observation.prior``:

- **Profiling runs** a policy asks for in ``Policy.prior_shapes`` — Optimus's
  20 (p, w) configurations, FA-BF's exhaustive search. The simulator measures
  them on the job's performance model, noise-free (a profiling run is long
  enough to average the noise out), and, as in NEARCHUS §V-A, does not count
  their time. Results are cached per (policy, model, budget).
- **Similar finished jobs** (DLRover §4.3): the final shape and measured
  speed of the last ``keep`` finished jobs of the same model on this cluster.
"""

from __future__ import annotations

from collections import deque

from rightsize.cluster.jobmodel import JobModel
from rightsize.core.resources import Resources
from rightsize.scaling.api import Policy, ShapeRecord

PRIOR_CACHE = 1024  # remembered prior tuples


class PriorBook:
    """Profiles on demand and remembers finished jobs, for one cluster."""

    def __init__(self, keep: int = 10) -> None:
        self.keep = keep
        self._profiles: dict[tuple[str, str, Resources], tuple[ShapeRecord, ...]] = {}
        self._finished: dict[str, deque[ShapeRecord]] = {}
        self._versions: dict[str, int] = {}  # finished jobs recorded per model
        self._priors: dict[tuple, tuple[ShapeRecord, ...]] = {}

    def profiled(
        self, policy: Policy, model: JobModel, budget: Resources
    ) -> tuple[ShapeRecord, ...]:
        key = (policy.name, model.model.name, budget)
        if key not in self._profiles:
            shapes = policy.prior_shapes(budget, model.cluster.node_limit)
            self._profiles[key] = tuple(ShapeRecord(s, model.speed(s)) for s in shapes)
        return self._profiles[key]

    def similar(self, model: str) -> tuple[ShapeRecord, ...]:
        return tuple(self._finished.get(model, ()))

    def record_finished(self, model: str, record: ShapeRecord) -> None:
        self._finished.setdefault(model, deque(maxlen=self.keep)).append(record)
        self._versions[model] = self._versions.get(model, 0) + 1

    def prior(self, policy: Policy, model: JobModel, budget: Resources) -> tuple[ShapeRecord, ...]:
        """Profiles then similar finished jobs; the same tuple object until either changes,
        so that policies may remember what they computed from it (FA-BF's search)."""
        name = model.model.name
        key = (policy.name, name, budget, self._versions.get(name, 0))
        if key not in self._priors:
            if len(self._priors) >= PRIOR_CACHE:
                self._priors.clear()
            self._priors[key] = self.profiled(policy, model, budget) + self.similar(name)
        return self._priors[key]
